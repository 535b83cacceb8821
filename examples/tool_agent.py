"""A tool-calling agent in the DSL: a shared system prompt, Python tools, a loop that stops on a final answer.

Every agent in the batch starts with the same long system prompt (the tool catalogue), so the
radix cache computes it once. Each step the model *selects* a tool (a constrained choice, so the
loop never has to parse free text), writes its argument under a regex, and the host runs the tool
and appends the observation; ``final_answer`` ends the loop.

    python3 examples/tool_agent.py                     # the embedded tiny model (random weights)
    python3 examples/tool_agent.py --model-path DIR    # a real HF checkpoint
"""

from __future__ import annotations

import argparse
import datetime

import radixlm as sgl


def calculator(expression: str) -> str:
    """Evaluate digits and + - * only (the regex below guarantees that shape)."""
    total, sign, number = 0, 1, ""
    for ch in expression + "+":
        if ch.isdigit():
            number += ch
        elif ch in "+-":
            total, number, sign = total + sign * int(number or 0), "", 1 if ch == "+" else -1
    return str(total)


def clock(_: str) -> str:
    return datetime.date(2024, 5, 1).isoformat()  # fixed, so runs are reproducible


TOOLS = {"calculator": calculator, "clock": clock}
SYSTEM = ("You are an agent. Each step, pick one tool: calculator (argument: arithmetic such as 12+7), "
          "clock (argument: none), or final_answer (argument: the answer). Observations follow each call. "
          * 4)


@sgl.function
def agent(s, task, max_steps):
    s += sgl.system(SYSTEM)
    s += sgl.user("Task: " + task)
    for step in range(max_steps):
        with s.assistant():
            s += "Tool: " + sgl.select(f"tool{step}", ["calculator", "clock", "final_answer"]) + "\n"
            s += "Argument: " + sgl.gen(f"arg{step}", max_tokens=8, regex=r"[0-9]{1,3}([+-][0-9]{1,3}){0,2}")
        tool = s[f"tool{step}"]
        if tool == "final_answer":
            s["answer"] = s[f"arg{step}"]
            return
        s += sgl.user("Observation: " + TOOLS[tool](s[f"arg{step}"]))
    s["answer"] = "(no final answer within the step budget)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--max-steps", type=int, default=3)
    args = ap.parse_args()
    engine = sgl.Engine(model_path=args.model_path, max_total_tokens=16384)
    sgl.set_default_backend(engine)
    tasks = ["What is 12+30?", "What day is it?", "Add 7 and 5, then subtract 3."]
    states = agent.run_batch([{"task": t, "max_steps": args.max_steps} for t in tasks], temperature=0)
    for task, st in zip(tasks, states):
        steps = [(st[f"tool{i}"], st[f"arg{i}"]) for i in range(args.max_steps) if f"tool{i}" in st]
        print(f"{task}\n  steps: {steps}\n  answer: {st['answer']}")
    stats = engine.get_stats()
    print(f"cache hit rate: {stats['cache_hit_rate']:.1%}")
    engine.shutdown()


if __name__ == "__main__":
    main()
