"""Smoke test of ``benchmarks/run.py --quick``: the suites run and write JSON / Markdown / PNG results."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

RUN = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


def test_quick_run_writes_results(tmp_path: Path, tiny_llama: str) -> None:
    out = tmp_path / "results"
    cmd = [sys.executable, str(RUN), "--suite", "agent", "--suite", "raw", "--quick", "--size", "tiny",
           "--reps", "1", "--systems", "radixlm,radixlm-nocache,llama.cpp", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    agent = json.loads((out / "agent.json").read_text())
    assert agent["suite"] == "agent" and agent["metric"] == "output_tok_per_s"
    for name in ("radixlm", "radixlm-nocache"):
        row = agent["systems"][name]
        assert row["status"] == "ok" and len(row["runs"]) == 1
        assert row["median"]["output_tokens"] == agent["workload"]["requests"] * agent["workload"]["new_tokens"]
    assert agent["systems"]["radixlm"]["median"]["cached_tokens"] > 0  # the shared system prompt was reused
    assert agent["systems"]["radixlm-nocache"]["median"]["cached_tokens"] == 0
    assert "radixlm_speedup" in agent["systems"]["radixlm-nocache"]
    same = agent["greedy_agreement"]["radixlm-nocache"]  # greedy, same ids: the cache must not change tokens
    assert same["identical"] == same["prompts"] == agent["workload"]["requests"]
    assert {t["name"] for t in agent["targets"]} >= {"radixlm / radixlm-nocache output tok/s"}
    raw = json.loads((out / "raw.json").read_text())
    assert raw["machine"]["read_gb_per_s"] > 0 and raw["machine"]["matmul_gflop_per_s"] > 0
    for config in ("decode-b1", "prefill-b1", "decode-b16", "prefill-b16"):
        assert 0 < raw["systems"][config]["roofline_fraction"]
    for name in ("agent.md", "raw.md", "summary.md", "agent.png", "raw.png"):
        assert (out / name).stat().st_size > 0, name
    assert "| radixlm |" in (out / "agent.md").read_text()


def test_unknown_suite_is_rejected(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(RUN), "--suite", "nope", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "suite must be one of" in proc.stderr


def test_grammar_benchmark_reads_any_directory_of_the_layout(tmp_path: Path, tiny_llama: str) -> None:
    data = tmp_path / "Mini"
    data.mkdir()
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 2}}, "required": ["n"]}
    tests = [{"valid": True, "data": {"n": 3}}, {"valid": False, "data": {"n": 1}}]
    (data / "a.json").write_text(json.dumps({"schema": schema, "tests": tests}))
    (data / "b.json").write_text(json.dumps({"schema": {"type": "string", "not": {"format": "email"}},
                                             "tests": []}))
    grammar_bench = RUN.parent / "bench_grammar.py"
    out = tmp_path / "rows.json"
    cmd = [sys.executable, str(grammar_bench), "--data", str(tmp_path), "--tokenizer", "tiny", "--walks", "1",
           "--systems", "radixlm", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    (row,) = figures["all"]
    assert figures["common"] == []  # one system: nothing to compare like for like
    assert (row["schemas"], row["compiled"], row["rejected_pointer"], row["timeouts"]) == (2, 1, 1, 0), row
    assert row["valid_accepted"] == [1, 1] and row["invalid_accepted"] == [0, 1], row
    assert row["walks_valid"][:2] == [1, 1], row


def test_grammar_benchmark_sets_the_front_end_knobs_in_its_workers(tmp_path: Path, tiny_llama: str) -> None:
    # A 2-member object takes any-order rules by default; --runtime-check-above -1 checks every
    # object at runtime instead, which only shows if the knob reached the worker process.
    data = tmp_path / "Mini"
    data.mkdir()
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
              "required": ["a", "b"], "additionalProperties": False}
    tests = [{"valid": True, "data": {"b": True, "a": 1}}, {"valid": False, "data": {"a": 1, "a ": 2}}]
    (data / "a.json").write_text(json.dumps({"schema": schema, "tests": tests}))
    out = tmp_path / "rows.json"
    cmd = [sys.executable, str(RUN.parent / "bench_grammar.py"), "--data", str(tmp_path), "--tokenizer", "tiny",
           "--walks", "1", "--systems", "radixlm,radixlm-knobs", "--runtime-check-above", "-1", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    default, knobs = figures["all"]
    assert [(r["system"], r["schemas"]) for r in figures["common"]] == [("radixlm", 1), ("radixlm-knobs", 1)]
    assert (default["system"], knobs["system"]) == ("radixlm", "radixlm-knobs")
    assert (default["runtime_checked"], knobs["runtime_checked"]) == (0, 1), (default, knobs)
    for row in (default, knobs):  # the same language either way
        assert row["valid_accepted"] == [1, 1] and row["invalid_accepted"] == [0, 1], row
        assert row["walks_valid"][:2] == [1, 1], row


def test_compile_split_times_both_halves_of_each_compiled_schema(tmp_path: Path, tiny_llama: str) -> None:
    data = tmp_path / "Mini"
    data.mkdir()
    small = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    wide = {"type": "object", "properties": {f"k{i}": {"type": "string", "maxLength": 9} for i in range(12)}}
    for name, schema in (("a", small), ("b", wide), ("c", {"type": "string", "not": {"format": "email"}})):
        (data / f"{name}.json").write_text(json.dumps({"schema": schema, "tests": []}))
    cmd = [sys.executable, str(RUN.parent / "bench_compile_split.py"), "--data", str(tmp_path),
           "--tokenizer", "tiny", "--threshold", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # c is rejected by the front end; a and b compile, and every core build takes more than 0 ms
    assert "2 schemas compiled; the core alone takes > 0 ms on 2 (100.0%" in out, out
    listed = [line.split()[-1] for line in out.splitlines() if line.endswith(".json")]
    assert sorted(listed) == ["Mini/a.json", "Mini/b.json"], out
    sizes = {line.split()[-1]: int(line.split()[-2]) for line in out.splitlines() if line.endswith(".json")}
    assert sizes["Mini/b.json"] > sizes["Mini/a.json"], out  # twelve members spell more Lark than one


def test_member_mask_benchmark_pairs_fresh_and_memo_checks(tmp_path: Path, tiny_llama: str) -> None:
    data = tmp_path / "Mini"
    data.mkdir()
    schema = {"type": "object", "additionalProperties": False, "required": ["n"], "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "n": {"type": "integer"}, "s": {"type": "string"}}}
    tests = [{"valid": True, "data": {"s": "a long value, here", "tags": ["a", "b"], "n": 1}},
             {"valid": False, "data": {"tags": ["a", "a"], "n": 1}}]
    (data / "a.json").write_text(json.dumps({"schema": schema, "tests": tests}))
    cmd = [sys.executable, str(RUN.parent / "bench_member_mask.py"), "--data", str(tmp_path), "--tokenizer", "tiny",
           "--every", "1", "--walks", "2", "--runtime-check-above", "-1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "1 schemas compiled (any-order rules 1024, runtime check above -1)" in out, out
    assert "valid accepted 1/1, invalid 0/1" in out, out
    calls = {line.split()[1]: int(line.split()[2]) for line in out.splitlines() if line.startswith("check,")}
    assert calls["fresh"] == calls["memo"] > 0, out  # the object is checked at runtime, each mask twice
    assert "fresh / memo total:" in out, out


def test_extra_keys_benchmark_times_both_key_forms(tiny_llama: str) -> None:
    cmd = [sys.executable, str(RUN.parent / "bench_extra_keys.py"), "--tokenizer", "tiny", "--reps", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [(n, f) for n in ("1", "3", "8", "20") for f in ("algebra", "trie")]
    assert all(float(x) > 0 for r in rows for x in r[2:]), proc.stdout


def test_grammar_benchmark_compares_like_for_like(monkeypatch) -> None:
    """``common_rows``: each system's figures over only the schemas every system compiled."""
    monkeypatch.syspath_prepend(str(RUN.parent))
    import bench_grammar

    def rec(name: str, status: str, mask: list[float]) -> dict:
        return {"name": name, "status": status, "compile_ms": float(len(mask)), "mask_us": mask}

    runs = {"ours": [rec("a", "compiled", [1.0]), rec("hard", "compiled", [500.0, 900.0])],
            "peer": [rec("a", "compiled", [2.0]), rec("hard", "rejected", [])]}
    ours, peer = bench_grammar.common_rows(runs)
    assert (ours["system"], ours["schemas"], ours["mask_us"]) == ("ours", 1, [1.0, 1.0, 1])
    assert (peer["system"], peer["schemas"], peer["mask_us"]) == ("peer", 1, [2.0, 2.0, 1])
    assert bench_grammar.common_rows({"ours": runs["ours"]}) == []


def test_grammar_benchmark_counts_only_sampled_passes(monkeypatch) -> None:
    """Jump-forward's share counts the tokens a walk sampled: not the completion ``_finish``
    splices into a walk cut at ``--max-tokens`` (the engine splices it too: no passes), and no EOS
    pass after a grammar that terminates by itself (the engine stops the request there)."""
    monkeypatch.syspath_prepend(str(RUN.parent))
    import bench_grammar
    from radixlm.constrained import TokenizerVocab, compile_grammar

    eos = 256
    vocab = TokenizerVocab.from_token_bytes([bytes([b]) for b in range(256)] + [None], [eos], vocab_size=260)
    tokenizer = SimpleNamespace(id_to_bytes=lambda t: vocab.token_bytes[t] or b"")
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
              "additionalProperties": False}
    grammar = compile_grammar(vocab, "json_schema", schema)
    ids, done, passes = bench_grammar.walk(grammar, random.Random(0), 12, [])
    assert done and passes == 12 and len(ids) > 12  # cut inside the string, closed by the completion
    assert b"".join(vocab.token_bytes[t] for t in ids[:9]) == b'{"name":"'  # forced, byte by byte
    sampled = bench_grammar.forced_tokens(grammar, tokenizer, ids[:passes])
    assert sampled == 9  # then 3 sampled characters of the value: none forced
    assert bench_grammar.forced_tokens(grammar, tokenizer, ids) > sampled  # the close is forced text
    doc = [vocab.byte_tokens[b] for b in b'{"name":"x"}']
    assert bench_grammar._eos_pass(grammar, doc) == 0  # ``}`` ends the object: terminated
    number = compile_grammar(vocab, "json_schema", {"type": "integer"})
    assert bench_grammar._eos_pass(number, [vocab.byte_tokens[b] for b in b"12"]) == 1  # 123 could follow
