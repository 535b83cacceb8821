"""Constrained decoding speed: the first constrained request's overhead, and constrained vs
unconstrained tokens/s at batch 1 and 16, on one checkpoint.

(a) **First request**: a fresh engine per repetition; once its grammar backend says ``ready``
(``--grammar-warmup`` builds it in the background at start-up), the first request with a
10-member schema, then two warm ones with schemas of the same shape and other keys (so each
compiles its grammar too). Reported: time to first token and whole-request time, first minus the
warm ones' median (target <= 200 ms), and the same on an engine started with
``--no-grammar-warmup`` (what the first request paid before) and for a first request sent the
moment the engine is built (it waits for whatever of the start is left).

(b) **Throughput**: the same 5-field extraction prompts (in the chat template), greedy, with and
without the schema, same ``max_new_tokens`` and stop; tokens/s = generated tokens after the first
/ (wall time - time to the last first token; jump-forward's spliced tokens count,
``--no-jump-forward`` samples them all), alternating sides within each repetition, median over
repetitions. Also sampled tokens per second of decode step (the engine's step timers: splices not
counted, every step's masks and constraint bookkeeping included) and the masks' share of the time
(``ModelRunner._grammar_bitmask`` timed). Target: constrained >= 0.97x unconstrained.

    python benchmarks/bench_constrained_speed.py --size small
    python benchmarks/bench_constrained_speed.py --model-path "$(python benchmarks/real_qwen_hf.py)" \\
        --quantization int8
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from radixlm.runtime.model import model_runner
from radixlm.runtime.testing import checkpoint_path

from radixlm import Engine

FIELDS = {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"},
          "email": {"type": "string"}, "phone": {"type": "string"}}
EXTRACTION = {"type": "object", "properties": FIELDS, "required": list(FIELDS), "additionalProperties": False}
PEOPLE = [("Ada Park", 36, "Lisbon"), ("Bo Chen", 29, "Osaka"), ("Cleo Diaz", 41, "Quito"),
          ("Dev Rao", 52, "Pune"), ("Eli Stone", 23, "Oslo"), ("Fay Lin", 47, "Perth"),
          ("Gus Holm", 31, "Malmo"), ("Hana Sato", 38, "Nara")]


def ten_member_schema(prefix: str) -> dict[str, Any]:
    """10 members, each key and type the same shape whatever ``prefix`` (a 3-letter tag)."""
    types = ["string", "integer", "string", "boolean", "string", "number", "string", "integer", "string", "string"]
    props = {f"{prefix}_field_{i}": {"type": t} for i, t in enumerate(types)}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def extraction_prompts(n: int, tokenizer: Any = None) -> list[str]:
    """``n`` distinct extraction prompts, through ``tokenizer``'s chat template when given."""
    out = []
    for i in range(n):
        name, age, city = PEOPLE[i % len(PEOPLE)]
        user = name.split()[0].lower()
        text = (f"Extract name, age, city, email and phone as JSON. Text #{i}: {name} ({age}) lives in {city}; "
                f"write to {user}{i}@example.com or call +1-555-01{i:02d}.")
        if tokenizer is None:
            out.append(text + "\nJSON:")
        else:
            out.append(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True))
    return out


def wait_ready(engine: Engine, timeout_s: float = 600) -> dict[str, Any]:
    end = time.monotonic() + timeout_s
    while (state := engine.get_stats()["grammar_backend"])["state"] not in ("ready", "failed"):
        if time.monotonic() > end:
            raise TimeoutError("the grammar backend did not get ready")
        time.sleep(0.01)
    return state


def timed(engine: Engine, prompt: Any, params: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    out = engine.generate(prompt, params)
    wall = time.perf_counter() - start
    outs = out if isinstance(out, list) else [out]
    ttft = max(o["meta_info"]["first_token_latency"] or 0.0 for o in outs)
    tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
    return {"wall_s": wall, "ttft_s": ttft, "tokens": tokens, "requests": len(outs)}


def first_request(model: str, engine_args: dict[str, Any], reps: int, max_new: int) -> dict[str, Any]:
    """Part (a); see the module docstring."""
    rows = []
    for rep in range(reps):
        for mode in ("warmup", "no-warmup", "at-once"):
            t0 = time.perf_counter()
            engine = Engine(model, grammar_warmup=mode != "no-warmup", **engine_args)
            start_s = time.perf_counter() - t0
            engine.generate("Hello", {"temperature": 0, "max_new_tokens": 4})  # the model's own first-call costs
            state = wait_ready(engine) if mode == "warmup" else None
            calls = [timed(engine, "Fill in the record as JSON:", {
                "temperature": 0, "max_new_tokens": max_new, "json_schema": json.dumps(ten_member_schema(tag))})
                for tag in (f"a{rep:02d}", f"b{rep:02d}", f"c{rep:02d}")]
            engine.shutdown()
            first, warm = calls[0], calls[1:]
            rows.append({"mode": mode, "rep": rep, "engine_start_s": start_s, "ready": state,
                         "first_ttft_s": first["ttft_s"], "first_wall_s": first["wall_s"],
                         "warm_ttft_s": statistics.median(c["ttft_s"] for c in warm),
                         "warm_wall_s": statistics.median(c["wall_s"] for c in warm),
                         "tokens": [c["tokens"] for c in calls]})
            print(json.dumps(rows[-1]), file=sys.stderr)
    return {mode: _summary([r for r in rows if r["mode"] == mode]) for mode in ("warmup", "no-warmup", "at-once")} | {
        "rows": rows}


def _summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    med = {k: statistics.median(r[k] for r in rows) for k in ("first_ttft_s", "warm_ttft_s", "first_wall_s",
                                                               "warm_wall_s", "engine_start_s")}
    med["overhead_ttft_ms"] = statistics.median((r["first_ttft_s"] - r["warm_ttft_s"]) * 1e3 for r in rows)
    med["overhead_wall_ms"] = statistics.median((r["first_wall_s"] - r["warm_wall_s"]) * 1e3 for r in rows)
    return med


class MaskClock:
    """Seconds spent in ``ModelRunner._grammar_bitmask`` (the masks of a step), patched in."""

    def __init__(self) -> None:
        self.seconds = 0.0
        original = model_runner.ModelRunner._grammar_bitmask

        def clocked(runner: Any, reqs: list) -> Any:
            start = time.perf_counter()
            try:
                return original(runner, reqs)
            finally:
                self.seconds += time.perf_counter() - start

        model_runner.ModelRunner._grammar_bitmask = clocked


def throughput(model: str, engine_args: dict[str, Any], batches: list[int], reps: int,
               max_new: int, chat: bool, jump_forward: bool = True) -> dict[str, Any]:
    """Part (b); see the module docstring."""
    clock = MaskClock()
    engine = Engine(model, **engine_args)
    wait_ready(engine)
    base = {"temperature": 0, "max_new_tokens": max_new}
    sides = {"unconstrained": base, "constrained": {**base, "json_schema": json.dumps(EXTRACTION),
                                                    "disable_jump_forward": not jump_forward}}
    out: dict[str, Any] = {}
    try:
        for bs in batches:
            prompts = extraction_prompts(bs, engine.tokenizer if chat else None)
            for params in sides.values():  # untimed: the grammar compiled and cached, the prompts cached
                engine.generate(prompts, params)
            runs: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
            for rep in range(reps):
                order = list(sides) if rep % 2 == 0 else list(reversed(sides))
                for side in order:
                    mask_before, timers = clock.seconds, engine.get_stats()["timers"]
                    r = timed(engine, prompts, sides[side])
                    r["mask_s"] = clock.seconds - mask_before
                    after = engine.get_stats()["timers"]  # sampled tokens per second of decode step
                    r["step_tok_s"] = ((after["decode_tokens"] - timers["decode_tokens"])
                                       / max(after["decode_step_s"] - timers["decode_step_s"], 1e-9))
                    r["tok_s"] = (r["tokens"] - r["requests"]) / max(r["wall_s"] - r["ttft_s"], 1e-9)
                    runs[side].append(r)
            row = {side: {"tok_s": statistics.median(r["tok_s"] for r in rs),
                          "step_tok_s": statistics.median(r["step_tok_s"] for r in rs),
                          "tokens": statistics.median(r["tokens"] for r in rs),
                          "mask_share": statistics.median(r["mask_s"] / r["wall_s"] for r in rs)}
                   for side, rs in runs.items()}
            row["ratio"] = row["constrained"]["tok_s"] / row["unconstrained"]["tok_s"]
            row["step_ratio"] = row["constrained"]["step_tok_s"] / row["unconstrained"]["step_tok_s"]
            out[f"batch_{bs}"] = row
            print(json.dumps({f"batch_{bs}": row}), file=sys.stderr)
    finally:
        engine.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="small", help="locally built llama checkpoint size (default: small)")
    p.add_argument("--model-path", help="any HF checkpoint folder instead of --size")
    p.add_argument("--quantization", choices=("int8",), help="passed to the engine")
    p.add_argument("--batches", default="1,16", help="batch sizes of part (b)")
    p.add_argument("--reps", type=int, default=3, help="repetitions of part (b)")
    p.add_argument("--first-reps", type=int, default=3, help="fresh engines per mode in part (a) (0: skip)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="part (b)")
    p.add_argument("--first-max-new-tokens", type=int, default=48, help="part (a)")
    p.add_argument("--raw-prompts", action="store_true", help="part (b): plain text prompts, no chat template")
    p.add_argument("--no-jump-forward", action="store_true",
                   help="part (b): every constrained token sampled (forced text not spliced)")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    args = p.parse_args(argv)
    model = args.model_path or checkpoint_path(arch="llama", size=args.size)
    engine_args: dict[str, Any] = {"max_total_tokens": 16384}
    if args.quantization:
        engine_args["quantization"] = args.quantization
    result: dict[str, Any] = {"model": str(model), "engine_args": engine_args}
    if args.first_reps:
        result["first_request"] = first_request(model, engine_args, args.first_reps, args.first_max_new_tokens)
    batches = [int(b) for b in args.batches.split(",") if b]
    if batches and args.reps:
        result["throughput"] = throughput(model, engine_args, batches, args.reps, args.max_new_tokens,
                                          not args.raw_prompts, not args.no_jump_forward)
    report(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


def report(result: dict[str, Any]) -> None:
    print(f"model: {result['model']} {result['engine_args']}")
    for mode, s in {k: v for k, v in result.get("first_request", {}).items() if k != "rows"}.items():
        print(f"first request [{mode:9}] ttft {s['first_ttft_s'] * 1e3:7.1f} ms vs warm {s['warm_ttft_s'] * 1e3:7.1f}"
              f" (+{s['overhead_ttft_ms']:.1f}); whole {s['first_wall_s'] * 1e3:7.1f} vs {s['warm_wall_s'] * 1e3:7.1f}"
              f" (+{s['overhead_wall_ms']:.1f} ms); engine start {s['engine_start_s']:.2f} s")
    for name, row in result.get("throughput", {}).items():
        c, u = row["constrained"], row["unconstrained"]
        print(f"{name:9} constrained {c['tok_s']:7.1f} tok/s ({c['tokens']:.0f} tok, masks {c['mask_share']:.1%})"
              f"  unconstrained {u['tok_s']:7.1f} tok/s ({u['tokens']:.0f} tok)  ratio {row['ratio']:.3f};"
              f"  sampled per decode-step second {c['step_tok_s']:.1f} vs {u['step_tok_s']:.1f}"
              f" ratio {row['step_ratio']:.3f}")


if __name__ == "__main__":
    sys.exit(main())
