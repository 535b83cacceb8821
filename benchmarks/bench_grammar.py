"""Grammar benchmark: radixlm, xgrammar and llguidance side by side, in one run, on one real vocabulary,
over JSONSchemaBench-layout data (``<Subset>/<name>.json`` with ``schema``, ``tests[{valid, data}]``).

Every system runs through the same path as the server: ``GrammarBackend(vocab, core=...)`` (the
``--grammar-backend`` flag; radixlm compiles in worker processes, the adapters in threads, all under
``--timeout``), then the ``GrammarMatcher`` interface. Per schema: compile wall time (submit to a
grammar), rejected with or without a JSON pointer, timeouts; every shipped instance's compact
serialisation walked token by token (valid ones must be accepted, invalid ones rejected; valid ones
laid out as the system writes them: rewritten into schema order, ``laid_out``, except for
``radixlm-any``, which compiles with ``json_key_order: "any"`` and takes them as shipped); random
walks (uniform among allowed tokens, fixed seeds: an untrained model at temperature 1), each output
checked with ``jsonschema``, ``fill_mask`` timed at every step; and the share of the walk's sampled
tokens that lay inside the forced continuation (the forward passes jump-forward saves), also over
the accepted valid instances' own tokens (the same ids for every system, documents a model would
write). A walk still open after ``--max-tokens`` is closed by ``_finish`` (the matcher's
completion, spliced as budget-aware completion does): its tokens are neither passes nor saved
ones. EOS takes a pass only where the grammar does not terminate by itself.

    python benchmarks/bench_grammar.py --tokenizer qwen2 [--limit 10] [--systems radixlm,xgrammar,llguidance]

``--systems radixlm,radixlm-knobs --runtime-check-above -1`` (or ``--any-order-rules N``) compares the
default front end with one of its cost knobs changed, in one run, through the same worker pool
(``frontend_knobs.py`` sets the knob in each worker).

``--tokenizer qwen2`` (151,936 tokens) and ``llama3`` (128,256) are llama.cpp's vocab GGUFs converted
to ``tokenizer.json`` (fetch once: ``python tests/llamacpp_assets.py``); ``small`` is our 32k test
checkpoint's. Targets (Qwen2): compile p50 <= 10 ms, p90 <= 50 ms, max <= 1 s, no timeouts;
coverage >= 98%; valid accepted >= 99.5%, invalid accepted 0; mask p50 <= 10 us, p99 <= 100 us.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import torch
from radixlm.constrained import ConstraintError, GrammarBackend, TokenizerVocab
from radixlm.constrained.adapters import CORES
from radixlm.constrained.testing.schema_order import schema_order_instances
from radixlm.constrained.testing.walks import accepts_text, allowed_ids, compact_json

sys.path.insert(0, str(Path(__file__).resolve().parent))  # frontend_knobs, here and in the workers
import frontend_knobs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GGUF_NAMES = {"qwen2": "qwen2", "llama3": "llama-bpe"}


def load_tokenizer(name: str):
    """``(Tokenizer, TokenizerVocab)`` for ``qwen2`` | ``llama3`` | ``small`` | ``tiny``."""
    from radixlm.runtime.engine.engine import freeze_startup_objects
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    if name in ("small", "tiny"):
        from radixlm.runtime.testing import checkpoint_path

        path = checkpoint_path("llama", name)
    else:
        from radixlm.runtime.testing.llamacpp_fixtures import gguf_tokenizer_dir

        path = gguf_tokenizer_dir(GGUF_NAMES[name])
    tokenizer = Tokenizer(path)
    vocab = TokenizerVocab.from_tokenizer(tokenizer)
    freeze_startup_objects()  # as an Engine does once started: full collections skip torch's objects
    return tokenizer, vocab


def compile_one(backend: GrammarBackend, schema, timeout: float,
                key_order: str = "schema") -> tuple[str, object, float]:
    """``(status, grammar or error text, ms)``; status compiled | rejected | rejected_pointer | timeout."""
    params = SimpleNamespace(constraint_kind="json_schema", json_schema=schema, whitespace_pattern=None, strict=True,
                             json_key_order=key_order)
    start = time.perf_counter()
    future = backend.submit(params)
    try:
        grammar = future.result(timeout=timeout + 5)
    except FutureTimeout:
        future.cancel()
        return "timeout", "no answer", (time.perf_counter() - start) * 1000
    except ConstraintError as e:
        status = "timeout" if "budget" in str(e) else "rejected_pointer" if e.pointer is not None else "rejected"
        return status, str(e)[:160], (time.perf_counter() - start) * 1000
    return "compiled", grammar, (time.perf_counter() - start) * 1000


def walk(grammar, rng: random.Random, max_tokens: int, mask_us: list[float]) -> tuple[list[int], bool, int]:
    """A random walk: ``(ids without EOS, finished, passes)``; ``passes`` counts the sampled tokens
    (EOS included when it was sampled; a grammar that terminates ends the request without a pass
    for EOS), not the completion ``_finish`` splices. The time of each mask goes into ``mask_us``."""
    matcher, ids, steps = grammar.matcher(), [], 0
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    eos = set(grammar.vocab.eos_token_ids)
    while not matcher.is_terminated() and steps < max_tokens:
        start = time.perf_counter_ns()
        matcher.fill_mask(row)
        mask_us.append((time.perf_counter_ns() - start) / 1000)
        allowed = allowed_ids(row)  # the row fill_mask wrote, not a second mask
        if not len(allowed):
            return ids, False, steps
        choice = int(allowed[rng.randrange(len(allowed))])  # what rng.choice(list(allowed)) picks
        steps += 1
        if not matcher.accept_token(choice):
            raise AssertionError(f"token {choice} was in the mask but the matcher rejected it")
        if choice not in eos:
            ids.append(choice)
    return ids, matcher.is_terminated() or _finish(matcher, grammar.vocab, ids), steps


def forced_tokens(grammar, tokenizer, ids: list[int]) -> int:
    """How many of ``ids`` lie inside the forced continuation where they were sampled: the forward
    passes jump-forward saves on this output (it splices forced text in one extend step)."""
    matcher, saved = grammar.matcher(), 0
    for t in ids:
        forced = matcher.forced_continuation().encode()
        saved += bool(forced) and forced.startswith(tokenizer.id_to_bytes(t))
        if not matcher.accept_token(t):
            raise AssertionError(f"the walk's token {t} is rejected on replay")
    return saved


def _eos_pass(grammar, ids: list[int]) -> int:
    """1 when a model writing ``ids`` needs a pass to sample EOS after them, 0 when the grammar
    terminates there (the engine then finishes the request without one)."""
    matcher = grammar.matcher()
    for t in ids:
        matcher.accept_token(t)
    return int(not matcher.is_terminated())


def _finish(matcher, vocab: TokenizerVocab, ids: list[int]) -> bool:
    """Close an open walk with the matcher's completion (what budget-aware completion splices in
    when a request's budget runs out), through single-byte tokens."""
    data = matcher.completion_bytes()
    if data is None:
        return False
    path = [vocab.byte_tokens[b] for b in data]
    if not all(t >= 0 and matcher.accept_token(t) for t in path):
        raise AssertionError("a completion was rejected by the matcher it came from")
    ids += path
    return True


def measure(grammar, tokenizer, doc: dict, args) -> dict:
    """Instances accepted, walks valid, masks, jump-forward steps for one compiled schema."""
    out = {"valid_ok": 0, "valid_n": 0, "invalid_acc": 0, "invalid_n": 0, "walks_ok": 0, "walks_n": 0,
           "unfinished": 0, "steps": 0, "forced": 0, "mask_us": [], "inst_steps": 0, "inst_forced": 0}
    for test in doc.get("tests", []):
        ok = accepts_text(grammar, tokenizer, compact_json(test["data"]))
        key = "valid" if test["valid"] else "invalid"
        out[f"{key}_n"] += 1
        out["valid_ok" if test["valid"] else "invalid_acc"] += ok
        if ok and test["valid"]:  # the same ids for every system: jump-forward on real documents
            ids = tokenizer.encode(compact_json(test["data"]))
            out["inst_steps"] += len(ids) + _eos_pass(grammar, ids)
            out["inst_forced"] += forced_tokens(grammar, tokenizer, ids)
    for seed in range(args.walks):
        ids, done, passes = walk(grammar, random.Random(seed), args.max_tokens, out["mask_us"])
        out["walks_n"] += 1
        out["unfinished"] += not done
        out["walks_ok"] += done and not grammar.validate_output(tokenizer.decode(ids))
        out["steps"] += passes
        out["forced"] += forced_tokens(grammar, tokenizer, ids[:passes])  # the sampled ones
    return out


# ``radixlm-strict``: our front end with the peers' default restrictions (xgrammar's strict mode
# and schema order): no member the schema does not name, properties in schema order.
STRICT = {"additional_properties": "declared", "property_order": "schema"}


def knob_env(args) -> dict[str, str]:
    """The environment that sets ``--runtime-check-above`` / ``--any-order-rules`` in the workers."""
    values = {"RUNTIME_CHECK_ABOVE": args.runtime_check_above, "MAX_ANY_ORDER_RULES": args.any_order_rules}
    return {frontend_knobs.ENV[k]: str(v) for k, v in values.items() if v is not None}


def run_system(system: str, files: list[Path], tokenizer, vocab: TokenizerVocab, args) -> list[dict]:
    """Every schema through ``GrammarBackend(core=...)``: one record per schema. ``radixlm-knobs``
    is ``radixlm-any`` with ``--runtime-check-above`` / ``--any-order-rules`` set in its workers."""
    core, strict = (system[:-len("-strict")], True) if system == "radixlm-strict" else (system, False)
    # the peers write schema order only; the knobs are the any-order layout's (its runtime checks)
    key_order = "any" if system in ("radixlm-any", "radixlm-knobs") else "schema"
    core = "radixlm" if system == "radixlm-any" else core
    extra, env = {}, {}
    if system == "radixlm-knobs":
        core, env = "radixlm", knob_env(args)
        extra["compile_fn"] = "frontend_knobs:compile_parts"
    with mock.patch.dict(os.environ, env):  # the pool copies the environment into every worker it starts
        return _run_backend(GrammarBackend(vocab, core=core, compile_timeout_s=args.timeout, num_workers=1,
                                           cache_size=len(files) + 1, **extra), (strict, key_order), system, files,
                            tokenizer, args)


def _run_backend(backend: GrammarBackend, layout: tuple[bool, str], system: str, files: list[Path], tokenizer,
                 args) -> list[dict]:
    """The records of one system's backend over ``files``; shuts the backend down. ``layout``:
    (the peers' restrictions as schema options, the json_key_order)."""
    strict, key_order = layout
    records = []
    try:
        compile_one(backend, {"type": "integer"}, args.timeout)  # warm-up: workers, native tokenizers
        for path in files:
            doc = json.loads(path.read_text())
            schema = doc["schema"]
            if strict and isinstance(schema, dict):
                schema = {**schema, "x-radixlm": {**schema.get("x-radixlm", {}), **STRICT}}
            status, value, ms = compile_one(backend, schema, args.timeout, key_order)
            rec = {"name": f"{path.parent.name}/{path.name}", "status": status, "compile_ms": ms}
            if status == "compiled":
                rec["runtime_checked"] = getattr(value, "unique", None) is not None  # uniqueItems / members
                rec.update(measure(value, tokenizer, laid_out(doc, key_order), args))
            else:
                rec["error"] = value
            records.append(rec)
            if args.verbose:
                print(f"  {system:10s} {status:16s} {ms:9.1f} ms  {rec['name']}", flush=True)
    finally:
        backend.shutdown()
    return records


def laid_out(doc: dict, key_order: str) -> dict:
    """``doc`` with its valid instances as ``key_order`` writes them: under schema order rewritten
    (``schema_order_instances``; rewrites that turn invalid are left out), under any order as shipped."""
    if key_order == "any":
        return doc
    valid, _ = schema_order_instances(doc["schema"], [t["data"] for t in doc.get("tests", []) if t["valid"]])
    invalid = [t for t in doc.get("tests", []) if not t["valid"]]
    return {**doc, "tests": [{"valid": True, "data": v} for v in valid] + invalid}


def in_process_grammars(vocab: TokenizerVocab, data: str, every: int, key_order: str = "any"):
    """``(path, doc, CompiledGrammar)`` of every ``every``-th schema under ``data``, compiled in
    this process with the front end's settings as they stand (the schemas it rejects skipped);
    ``key_order`` "any" by default: the mask benchmarks study the runtime member checks, which
    only the any-order layout has."""
    from radixlm.constrained.backend import build_grammar as CompiledGrammar
    from radixlm.constrained.backend import constraint_grammar
    from radixlm.constrained.compile.worker import CompileRequest

    for path in sorted(Path(data).glob("*/*.json"))[::every]:
        doc = json.loads(path.read_text(encoding="utf-8"))
        try:
            parts = constraint_grammar(CompileRequest("json_schema", doc["schema"], None, True, key_order))
        except ConstraintError:
            continue
        yield path, doc, CompiledGrammar(vocab, parts.lark, "json_schema", doc["schema"], parts.relaxed,
                                         parts.notes, parts.unique)


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def summary(core: str, records: list[dict]) -> dict:
    """The figures of one system (one row of the table)."""
    done = [r for r in records if r["status"] == "compiled"]
    def total(key):
        return sum(r.get(key, 0) for r in done)
    cms = [r["compile_ms"] for r in done]
    masks = [x for r in done for x in r["mask_us"]]
    steps, forced = total("steps"), total("forced")
    return {
        "system": core, "schemas": len(records), "compiled": len(done),
        "rejected_pointer": sum(r["status"] == "rejected_pointer" for r in records),
        "rejected": sum(r["status"] == "rejected" for r in records),
        "timeouts": sum(r["status"] == "timeout" for r in records),
        "runtime_checked": total("runtime_checked"),
        "compile_ms": [_pct(cms, 50), _pct(cms, 90), max(cms, default=float("nan"))],
        "valid_accepted": [total("valid_ok"), total("valid_n")],
        "invalid_accepted": [total("invalid_acc"), total("invalid_n")],
        "mask_us": [_pct(masks, 50), _pct(masks, 99), len(masks)],
        "walks_valid": [total("walks_ok"), total("walks_n"), total("unfinished")],
        "jump_forward_saved": forced / steps if steps else float("nan"),
        "jump_forward_instances": total("inst_forced") / total("inst_steps") if total("inst_steps") else float("nan"),
    }


def print_table(rows: list[dict]) -> None:
    print(f"\n{'system':10s} {'compiled':>9s} {'rej+ptr':>7s} {'rej':>4s} {'t/o':>4s} {'compile ms p50/p90/max':>24s} "
          f"{'valid acc':>10s} {'invalid acc':>11s} {'mask us p50/p99':>16s} {'walks ok':>9s} {'jf saved':>8s} {'jf inst':>7s}")
    for r in rows:
        c, m = r["compile_ms"], r["mask_us"]
        print(f"{r['system']:10s} {r['compiled']:>4d}/{r['schemas']:<4d} {r['rejected_pointer']:>7d} {r['rejected']:>4d} "
              f"{r['timeouts']:>4d} {c[0]:>8.1f}/{c[1]:>7.1f}/{c[2]:>7.1f} "
              f"{r['valid_accepted'][0]:>5d}/{r['valid_accepted'][1]:<4d} {r['invalid_accepted'][0]:>5d}/"
              f"{r['invalid_accepted'][1]:<5d} {m[0]:>7.1f}/{m[1]:>8.1f} {r['walks_valid'][0]:>4d}/{r['walks_valid'][1]:<4d}"
              f" {r['jump_forward_saved']:>8.1%} {r['jump_forward_instances']:>7.1%}")
    print("(rej+ptr: rejected with a JSON pointer; walks ok: finished and valid; masks per sampled token;\n"
          " jf saved: walk tokens inside the forced text; jf inst: the same over the valid instances' tokens)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(REPO / "tests" / "data" / "jsonschemabench"))
    p.add_argument("--tokenizer", default="qwen2", choices=["qwen2", "llama3", "small", "tiny"])
    p.add_argument("--systems", default=",".join(CORES),
                   help="comma-separated --grammar-backend names, radixlm-any (json_key_order any), "
                        "radixlm-strict (our front end with the "
                        "peers' default restrictions: only named members, in schema order) and radixlm-knobs "
                        "(radixlm with --runtime-check-above / --any-order-rules)")
    p.add_argument("--timeout", type=float, default=10.0, help="compile budget per schema, seconds")
    p.add_argument("--walks", type=int, default=1, help="random walks per schema")
    p.add_argument("--max-tokens", type=int, default=256, help="sampled tokens before a walk is closed")
    p.add_argument("--limit", type=int, default=0, help="only the first N schemas (0: all)")
    p.add_argument("--every", type=int, default=1, help="every K-th schema (a sample across the subsets)")
    p.add_argument("--json", default="", help="also write the per-system figures to this file")
    p.add_argument("--verbose", action="store_true", help="one line per schema and system")
    p.add_argument("--runtime-check-above", type=int, default=None,
                   help="for the radixlm-knobs system: objects of more named members are checked at runtime "
                        "(-1: every object; default: json_schema.objects.RUNTIME_CHECK_ABOVE)")
    p.add_argument("--any-order-rules", type=int, default=None,
                   help="for the radixlm-knobs system: the any-order rule budget per schema "
                        "(default: json_schema.objects.MAX_ANY_ORDER_RULES)")
    args = p.parse_args()
    if knob_env(args) and "radixlm-knobs" not in args.systems.split(","):
        p.error("--runtime-check-above / --any-order-rules apply to the radixlm-knobs system only: add it to --systems")
    files = sorted(Path(args.data).glob("*/*.json"))[:: max(args.every, 1)][: args.limit or None]
    if not files:
        raise SystemExit(f"no <Subset>/<name>.json files under {args.data}")
    tokenizer, vocab = load_tokenizer(args.tokenizer)
    print(f"{len(files)} schemas, {args.tokenizer} vocabulary ({vocab.vocab_size} tokens)", flush=True)
    rows, runs = [], {}
    for core in args.systems.split(","):
        # each system's own vocabulary: llguidance's tokenizer with its shipped slices, radixlm's with its one
        own = TokenizerVocab.from_token_bytes(vocab.token_bytes, vocab.eos_token_ids, vocab.vocab_size,
                                              vocab.special_names, vocab.encode)
        try:
            runs[core] = run_system(core, files, tokenizer, own, args)
        except ValueError as e:  # an unknown or uninstalled backend
            print(f"{core}: {e}")
            continue
        rows.append(summary(core, runs[core]))
    print_table(rows)
    common = common_rows(runs)
    if common:
        print(f"\nThe same, on the {common[0]['schemas']} schemas every system compiles (like for like):")
        print_table(common)
    if args.json:
        Path(args.json).write_text(json.dumps({"all": rows, "common": common}, indent=2))


def common_rows(runs: dict[str, list[dict]]) -> list[dict]:
    """Each system's figures over only the schemas that every system compiled (none for one
    system): a system that rejects the hard schemas otherwise reports easier masks and compiles."""
    if len(runs) < 2:
        return []
    names = set.intersection(*({r["name"] for r in recs if r["status"] == "compiled"} for recs in runs.values()))
    return [summary(core, [r for r in recs if r["name"] in names]) for core, recs in runs.items()]


if __name__ == "__main__":
    main()
