"""Tree-of-thought suite: P programs, each ``fork(4)`` thoughts, then ``fork(4)`` checks per thought.

radixlm runs the DSL program (forks pre-fill the shared text once, children hit the radix cache);
``radixlm-nocache`` the same program on the cache-less engine. ``hf`` does the same token work
level by level: one batched generate for all first-level thoughts, one for all second-level checks,
each prompt resent in full. Throughput: programs per second (and output tokens per second).
"""

from __future__ import annotations

from typing import Any

from suites.context import SuiteContext
from suites.measure import alternate, summarize
from suites.workloads import tot_problems

SYSTEMS = ("radixlm", "radixlm-nocache", "hf")
WIDTH = 4
HEADER = "You solve planning problems by exploring several lines of thought, then checking each one.\n"


def _program():
    import radixlm as sgl

    @sgl.function
    def tree(s, problem, tokens):
        s += HEADER + "Problem: " + problem + "\n"
        thoughts = s.fork(WIDTH)
        thoughts += lambda i: f"Thought {i + 1}: " + sgl.gen("thought", max_tokens=tokens, ignore_eos=True)
        for thought in thoughts:
            checks = thought.fork(WIDTH)
            checks += lambda j: f"\nCheck {j + 1}: " + sgl.gen("check", max_tokens=tokens, ignore_eos=True)
            checks.join()
        thoughts.join()

    return tree


def dsl_trial(engine: Any, problems: list[str], tokens: int, prefill: bool):
    from radixlm.lang.backends import EngineBackend

    program, backend = _program(), EngineBackend(engine)

    def trial() -> dict[str, Any]:
        before = engine.get_stats()
        program.run_batch([{"problem": p, "tokens": tokens} for p in problems], backend=backend,
                          prefill_prefix=prefill, temperature=0)
        after = engine.get_stats()
        return {"items": len(problems), "output_tokens": len(problems) * WIDTH * (WIDTH + 1) * tokens,
                "prompt_tokens": after["prompt_tokens"] - before["prompt_tokens"],
                "cached_tokens": after["cached_tokens"] - before["cached_tokens"]}
    return trial


def hf_trial(system: Any, tokenizer: Any, problems: list[str], tokens: int):
    roots = [tokenizer.encode(HEADER + "Problem: " + p + "\n", add_special_tokens=True) for p in problems]
    thought_heads = [tokenizer.encode(f"Thought {i + 1}: ") for i in range(WIDTH)]
    check_heads = [tokenizer.encode(f"\nCheck {j + 1}: ") for j in range(WIDTH)]

    def trial() -> dict[str, Any]:
        level1 = [r + h for r in roots for h in thought_heads]
        gen1 = system.generate(level1, tokens)
        level2 = [p + o + h for p, o in zip(level1, gen1.outputs) for h in check_heads]
        gen2 = system.generate(level2, tokens)
        return {"items": len(problems), "output_tokens": gen1.output_tokens + gen2.output_tokens,
                "prompt_tokens": gen1.prompt_tokens + gen2.prompt_tokens, "cached_tokens": 0}
    return trial


def run(ctx: SuiteContext) -> dict[str, Any]:
    num = ctx.scale(16, 2)
    tokens = ctx.scale(16, 4)
    problems = tot_problems(num)
    ready, missing = ctx.pick(SYSTEMS)
    ctx.log(f"tree_of_thought: {num} programs, fork({WIDTH}) x fork({WIDTH}), {tokens} tokens per gen")
    trials, warm = {}, {}
    for name, system in ready.items():
        if name.startswith("radixlm"):
            trials[name] = dsl_trial(system.engine, problems, tokens, name == "radixlm")
            warm[name] = dsl_trial(system.engine, problems[:1], 2, name == "radixlm")
        else:
            trials[name] = hf_trial(system, ctx.tokenizer, problems, tokens)
            warm[name] = hf_trial(system, ctx.tokenizer, problems[:1], 2)
    runs = alternate(trials, ctx.reps, warmups=warm, resets={n: s.reset for n, s in ready.items()}, log=ctx.log)
    systems = summarize(runs, "radixlm", metric="items_per_s", unavailable=missing)
    return {"workload": {"programs": num, "width": WIDTH, "levels": 2, "tokens_per_gen": tokens},
            "metric": "items_per_s", "systems": systems, "targets": []}
