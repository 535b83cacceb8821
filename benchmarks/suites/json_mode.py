"""JSON suite: schema-constrained tool calls with jump-forward on vs off (same engine, alternating).

Every request asks for a tool call constrained by ``TOOL_CALL_SCHEMA`` (long keys and enums, so
much of the output is forced text). With jump-forward the engine appends forced text without a
forward pass per token; ``disable_jump_forward`` turns that off per request. Throughput: output
(completion) tokens per second; also requests/s, forward passes per request, and JSON validity.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import jsonschema

from suites.context import SuiteContext
from suites.measure import alternate, summarize, target
from suites.workloads import TOOL_CALL_SCHEMA, user_turn


def json_trial(system: Any, prompts: list[list[int]], max_tokens: int, jump: bool, stats: dict):
    schema = json.dumps(TOOL_CALL_SCHEMA)

    def trial() -> dict[str, Any]:
        gen = system.generate(prompts, max_tokens, json_schema=schema, disable_jump_forward=not jump,
                              ignore_eos=False)
        valid = 0
        for text in gen.extra["texts"]:
            try:
                jsonschema.validate(json.loads(text), TOOL_CALL_SCHEMA)
                valid += 1
            except (ValueError, jsonschema.ValidationError):
                pass
        stats["valid_fraction"] = valid / len(prompts)
        stats["forward_passes_median"] = statistics.median(gen.extra["forward_passes"])
        return {"items": len(prompts), "output_tokens": gen.output_tokens, "prompt_tokens": gen.prompt_tokens,
                "cached_tokens": gen.cached_tokens, "forward_passes": sum(gen.extra["forward_passes"]),
                "valid": valid}
    return trial


def run(ctx: SuiteContext) -> dict[str, Any]:
    num = ctx.scale(64, 4)
    max_tokens = 160
    tok = ctx.tokenizer
    prompts = [tok.encode(tok.apply_chat_template([
        {"role": "system", "content": "Reply with one JSON tool call for the travel request."},
        {"role": "user", "content": user_turn(2000 + i, words=15)}]), add_special_tokens=True) for i in range(num)]
    system = ctx.pool.get("radixlm")
    ctx.log(f"json: {num} schema-constrained requests, jump-forward on vs off")
    stats: dict[str, dict] = {"jump-forward": {}, "no-jump-forward": {}}
    trials = {name: json_trial(system, prompts, max_tokens, name == "jump-forward", stats[name]) for name in stats}
    warm = {name: json_trial(system, prompts[:2], max_tokens, name == "jump-forward", {}) for name in stats}
    runs = alternate(trials, ctx.reps, warmups=warm, resets={n: system.reset for n in stats}, log=ctx.log)
    systems = summarize(runs, "jump-forward")
    for name, extra in stats.items():
        systems[name].update(extra)
    speedup = systems["no-jump-forward"].get("jump-forward_speedup")
    return {"workload": {"requests": num, "max_new_tokens": max_tokens, "schema": TOOL_CALL_SCHEMA},
            "metric": "output_tok_per_s", "systems": systems,
            "targets": [target("jump-forward / no-jump-forward output tok/s", speedup, 1.3)]}
