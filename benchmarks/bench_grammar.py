"""Grammar benchmark over JSONSchemaBench-layout data (``<Subset>/<name>.json`` with ``schema``,
``tests[{valid, data}]``).

Per schema, a forked child compiles the grammar (killed at ``--timeout``: not covered), then walks
every shipped instance's compact serialisation through a matcher, times ``fill_mask`` along random
token walks (uniform among allowed tokens, fixed seed: an untrained model at temperature 1), checks
each walk's output with ``jsonschema``, and counts sampling steps with and without jump-forward.
If ``xgrammar`` or ``llguidance`` is installed, it is measured on the same schemas in the same run
(compile coverage within the budget, compile ms, mask us along a random walk).

    python3 benchmarks/bench_grammar.py [--data tests/data/jsonschemabench] [--tokenizer small]

Targets (issue 5): coverage >= 90%, mask p50 <= 10 us and p99 <= 100 us on a 32k vocabulary,
zero invalid instances accepted, every generated output valid.

Last run (llama small tokenizer, 32k vocab, 252 schemas, --walks 1, 2 shared CPU cores):
coverage 242/252 = 96.0% (10 strict errors, all adversarial `not` forms; 0 compile timeouts;
22 large schemas compiled under the size budget's restrictions); compile ms p50 45 p90 1325
(max 8.4 s); mask us/token p50 4.4 p99 43; valid instances accepted 237/276, invalid rejected
320/320; random-walk outputs valid 240/240;
jump-forward saves 18.4% of forward passes on random walks. Same schemas, same vocabulary
(`--systems xgrammar,llguidance`, xgrammar 0.2.9 and llguidance 1.9.1 from PyPI): xgrammar
covers 251/252 but accepts 26/320 invalid instances (keywords it does not enforce), mask p50 6.9
p99 86; llguidance covers 201/252 = 79.8%, accepts 0/236 invalid, mask p50 22.7 p99 228.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from radixlm.constrained import ConstraintError, TokenizerVocab, compile_grammar
from radixlm.constrained.testing.walks import accepts_text, compact_json, random_walk

REPO = Path(__file__).resolve().parents[1]


def _measure(grammar, tokenizer, doc: dict, walks: int, max_tokens: int) -> dict:
    out = {"valid_ok": 0, "valid_n": 0, "invalid_ok": 0, "invalid_n": 0, "walks_ok": 0, "walks_n": 0,
           "steps": 0, "jf_steps": 0, "mask_us": []}
    for test in doc.get("tests", []):
        ok = accepts_text(grammar, tokenizer, compact_json(test["data"]))
        key = "valid" if test["valid"] else "invalid"
        out[f"{key}_n"] += 1
        out[f"{key}_ok"] += ok if test["valid"] else (not ok)
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    for seed in range(walks):
        res = random_walk(grammar, random.Random(seed), max_tokens)
        jres = random_walk(grammar, random.Random(seed), max_tokens, tokenizer, jump=True)
        if res is None or jres is None:
            continue
        out["walks_n"] += 1
        text = tokenizer.decode(res[0])
        out["walks_ok"] += not grammar.validate_output(text)
        out["steps"], out["jf_steps"] = out["steps"] + res[1], out["jf_steps"] + jres[1]
        m = grammar.matcher()
        for t in res[0]:  # time fill_mask at every state of the walk
            start = time.perf_counter_ns()
            m.fill_mask(row)
            out["mask_us"].append((time.perf_counter_ns() - start) / 1000)
            m.accept_token(t)
    return out


def _child(conn, doc: dict, walks: int, max_tokens: int) -> None:
    tokenizer, vocab = _SHARED
    start = time.perf_counter()
    try:
        grammar = compile_grammar(vocab, "json_schema", doc["schema"])
    except ConstraintError as e:
        conn.send(("error", str(e)[:200]))
        return
    conn.send(("compiled", (time.perf_counter() - start) * 1000))
    conn.send(("measured", _measure(grammar, tokenizer, doc, walks, max_tokens)))


_SHARED: tuple = ()  # (tokenizer, vocab), built before forking and inherited by the children


def run_radixlm(files: list[Path], tok_path: str, args) -> list[dict]:
    global _SHARED
    from radixlm.runtime.engine.tokenizer import Tokenizer

    tokenizer = Tokenizer(tok_path)
    _SHARED = (tokenizer, TokenizerVocab.from_tokenizer(tokenizer))
    ctx = mp.get_context("fork")
    results = []
    for path in files:
        doc = json.loads(path.read_text())
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(child, doc, args.walks, args.max_tokens))
        proc.start()
        rec = {"name": f"{path.parent.name}/{path.name}", "status": "timeout"}
        if parent.poll(args.timeout + 1):
            kind, value = parent.recv()
            rec["status"] = kind
            if kind == "compiled" and value > args.timeout * 1000:
                rec["status"] = "timeout"
            elif kind == "compiled":
                rec["compile_ms"] = value
                if parent.poll(600):
                    rec.update(parent.recv()[1])
            else:
                rec["error"] = value
        proc.kill()
        proc.join()
        results.append(rec)
        print(f"{rec['status']:9s} {rec.get('compile_ms', 0):9.1f} ms  {rec['name']}", flush=True)
    return results


@dataclass
class Session:
    """One matcher of another engine: what ``run_external`` drives."""

    fill: Callable  # fill(bitmask): the next-token mask into an int32 (1, words) tensor
    accept: Callable  # accept(token) -> bool
    done: Callable  # done() -> bool: terminated
    accepting: Callable  # accepting() -> bool: the text so far is complete
    bitmask: torch.Tensor


def run_external(name: str, files: list[Path], starter, timeout: float) -> None:
    """Compile coverage, mask time and invalid instances accepted for another engine on the same
    schemas. ``starter = (start(schema) -> Session, encode(text) -> ids)``; start raises when
    the schema is not supported."""
    start, encode = starter
    ok, compile_ms, mask_us, bad_in, bad_n = 0, [], [], 0, 0
    for path in files:
        doc = json.loads(path.read_text())
        begin = time.perf_counter()
        try:
            sess = start(doc["schema"])
        except Exception:  # noqa: BLE001 - any failure counts as not covered
            continue
        ms = (time.perf_counter() - begin) * 1000
        if ms > timeout * 1000:
            continue
        ok, compile_ms = ok + 1, compile_ms + [ms]
        mask_us += _walk_external(sess)
        for test in (t for t in doc.get("tests", []) if not t["valid"]):
            walker = start(doc["schema"])
            bad_n += 1
            bad_in += all(walker.accept(t) for t in encode(compact_json(test["data"]))) and walker.accepting()
    print(f"{name}: coverage {ok}/{len(files)} = {ok / len(files):.1%}, compile ms p50 "
          f"{_pct(compile_ms, 50):.1f} p90 {_pct(compile_ms, 90):.1f}, mask us p50 {_pct(mask_us, 50):.1f} "
          f"p99 {_pct(mask_us, 99):.1f}, invalid instances accepted {bad_in}/{bad_n}")


def _walk_external(sess: Session) -> list[float]:
    """A uniform random walk (fixed seed), timing each mask."""
    rng, times = random.Random(0), []
    for _ in range(50):
        if sess.done():
            break
        begin_ns = time.perf_counter_ns()
        sess.fill(sess.bitmask)
        times.append((time.perf_counter_ns() - begin_ns) / 1000)
        words = sess.bitmask[0].numpy().view("uint32")
        allowed = [i * 32 + b for i, w in enumerate(words) if w for b in range(32) if (w >> b) & 1]
        if not allowed:
            break
        sess.accept(rng.choice(allowed))
    return times


def xgrammar_starter(tok_path: str):
    """``run_external``'s starter for xgrammar: compact JSON, one compile thread."""
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_file=str(Path(tok_path) / "tokenizer.json"))
    info = xgr.TokenizerInfo.from_huggingface(hf)
    compiler = xgr.GrammarCompiler(info, max_threads=1)

    def start(schema) -> Session:
        matcher = xgr.GrammarMatcher(compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                                                  separators=(",", ":")))
        return Session(lambda bm: matcher.fill_next_token_bitmask(bm, 0), matcher.accept_token,
                       matcher.is_terminated, lambda: matcher.accept_token(info.stop_token_ids[0]),
                       xgr.allocate_token_bitmask(1, info.vocab_size))
    return start, lambda text: hf.encode(text, add_special_tokens=False)


def llguidance_starter(tok_path: str):
    """``run_external``'s starter for llguidance: compact JSON."""
    import llguidance
    import llguidance.hf
    import llguidance.torch as llt
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_file=str(Path(tok_path) / "tokenizer.json"))
    tokenizer = llguidance.hf.from_tokenizer(hf)

    def start(schema) -> Session:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
        matcher = llguidance.LLMatcher(tokenizer, grammar)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return Session(lambda bm: llt.fill_next_token_bitmask(matcher, bm, 0), matcher.consume_token,
                       matcher.is_stopped, matcher.is_accepting, llt.allocate_token_bitmask(1, tokenizer.vocab_size))
    return start, lambda text: hf.encode(text, add_special_tokens=False)


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    return statistics.quantiles(xs, n=100, method="inclusive")[min(max(int(q) - 1, 0), 98)] if len(xs) > 1 else xs[0]


def summarise(results: list[dict]) -> None:
    n = len(results)
    done = [r for r in results if r["status"] == "compiled"]
    def total(key):
        return sum(r.get(key, 0) for r in done)
    masks = [x for r in done for x in r.get("mask_us", [])]
    print(f"\nradixlm: coverage {len(done)}/{n} = {len(done) / n:.1%} "
          f"(strict errors {sum(r['status'] == 'error' for r in results)}, "
          f"timeouts {sum(r['status'] == 'timeout' for r in results)})")
    cms = [r["compile_ms"] for r in done]
    print(f"compile ms p50 {_pct(cms, 50):.1f} p90 {_pct(cms, 90):.1f}")
    print(f"mask us/token p50 {_pct(masks, 50):.2f} p99 {_pct(masks, 99):.2f} over {len(masks)} masks")
    print(f"valid instances accepted {total('valid_ok')}/{total('valid_n')}; invalid rejected "
          f"{total('invalid_ok')}/{total('invalid_n')} (accepted: {total('invalid_n') - total('invalid_ok')})")
    print(f"random-walk outputs valid {total('walks_ok')}/{total('walks_n')}")
    steps, jf = total("steps"), total("jf_steps")
    print(f"forward passes: {steps} plain, {jf} with jump-forward ({1 - jf / max(steps, 1):.1%} saved)")
    errors: dict[str, int] = {}
    for r in results:
        if r["status"] == "error":
            kw = r["error"].split("'")[1] if "keyword '" in r["error"] else r["error"][:50]
            errors[kw] = errors.get(kw, 0) + 1
    print("not covered by:", ", ".join(f"{k} x{v}" for k, v in sorted(errors.items(), key=lambda x: -x[1])))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(REPO / "tests" / "data" / "jsonschemabench"))
    p.add_argument("--tokenizer", default="small", choices=["tiny", "small"],
                   help="test checkpoint whose tokenizer to use (small: 32k vocabulary)")
    p.add_argument("--timeout", type=float, default=10.0, help="compile budget per schema, seconds")
    p.add_argument("--walks", type=int, default=2, help="random walks per schema")
    p.add_argument("--max-tokens", type=int, default=120, help="sampled tokens before a walk finishes")
    p.add_argument("--limit", type=int, default=0, help="only the first N schemas (0: all)")
    p.add_argument("--systems", default="radixlm,xgrammar,llguidance",
                   help="comma-separated: radixlm, xgrammar, llguidance (the last two if installed)")
    args = p.parse_args()
    args.systems = args.systems.split(",")
    from radixlm.runtime.checkpoints.synthetic import checkpoint_path

    files = sorted(Path(args.data).glob("*/*.json"))
    if args.limit:
        files = files[: args.limit]
    if not files:
        raise SystemExit(f"no <Subset>/<name>.json files under {args.data}")
    tok_path = checkpoint_path("llama", args.tokenizer)
    if "radixlm" in args.systems:
        summarise(run_radixlm(files, tok_path, args))
    for name, starter in (("xgrammar", xgrammar_starter), ("llguidance", llguidance_starter)):
        if name not in args.systems:
            continue
        if importlib.util.find_spec(name) is None:
            print(f"{name}: not installed")
        else:
            run_external(name, files, starter(tok_path), args.timeout)

if __name__ == "__main__":
    main()
