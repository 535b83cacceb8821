"""Multi-turn chat suite: C conversations x T turns, each turn resending the whole history.

All conversations advance together, one batch per turn; turn t+1's prompt is turn t's prompt,
its generated tokens, and the next user turn (token ids, so a prefix cache can match exactly).
radixlm reuses each conversation's history from its radix cache; HF recomputes it.
"""

from __future__ import annotations

from typing import Any

from suites.context import SuiteContext
from suites.measure import alternate, summarize
from suites.workloads import chat_followup, chat_openers

# llama.cpp's best configuration here is the per-conversation saved-state cache of ``llama.cpp-serial``.
SYSTEMS = ("radixlm", "radixlm-nocache", "hf", "llama.cpp-serial")


def conversation_trial(system: Any, openers: list[list[int]], followups: list[list[list[int]]],
                       new_tokens: int):
    """A trial running every conversation for ``len(followups) + 1`` turns."""
    def trial() -> dict[str, Any]:
        prompts = [list(p) for p in openers]
        out_tokens = prompt_tokens = cached = 0
        for turn in range(len(followups) + 1):
            gen = system.generate(prompts, new_tokens)
            out_tokens += gen.output_tokens
            prompt_tokens += gen.prompt_tokens
            cached += gen.cached_tokens
            if turn < len(followups):
                prompts = [p + o + followups[turn][c] for c, (p, o) in enumerate(zip(prompts, gen.outputs))]
        return {"output_tokens": out_tokens, "prompt_tokens": prompt_tokens, "cached_tokens": cached,
                "final_prompt_tokens": max(len(p) for p in prompts)}
    return trial


def run(ctx: SuiteContext) -> dict[str, Any]:
    convs = ctx.scale(32, 4)
    turns = ctx.scale(4, 2)
    new_tokens = ctx.scale(32, 8)
    tok = ctx.tokenizer
    openers = chat_openers(tok, convs)
    followups = [[chat_followup(tok, c, t) for c in range(convs)] for t in range(1, turns)]
    ready, missing = ctx.pick(SYSTEMS)
    ctx.log(f"chat: {convs} conversations x {turns} turns, {new_tokens} new tokens per turn")
    trials = {n: conversation_trial(s, openers, followups, new_tokens) for n, s in ready.items()}
    warm = {n: conversation_trial(s, openers[:2], [f[:2] for f in followups[:1]], 2) for n, s in ready.items()}
    runs = alternate(trials, ctx.reps, warmups=warm, resets={n: s.reset for n, s in ready.items()}, log=ctx.log)
    systems = summarize(runs, "radixlm", unavailable=missing)
    return {"workload": {"conversations": convs, "turns": turns, "new_tokens": new_tokens},
            "metric": "output_tok_per_s", "systems": systems, "targets": []}
