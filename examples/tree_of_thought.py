"""Tree of thought with ``fork``/``join``: several thoughts per problem, each checked, then a verdict.

``s.fork(n)`` makes n children that share the text so far (pre-filled once, so every child's
request hits the radix cache); ``join()`` turns each child's variables into lists on the parent.

    python3 examples/tree_of_thought.py [--model-path DIR]
"""

from __future__ import annotations

import argparse

import radixlm as sgl


@sgl.function
def tree(s, problem, width):
    s += sgl.system("You solve problems by exploring several approaches and checking each.")
    s += sgl.user("Problem: " + problem)
    s += sgl.assistant_begin()
    thoughts = s.fork(width)
    thoughts += lambda i: f"Approach {i + 1}: " + sgl.gen("thought", max_tokens=12, stop="\n")
    thoughts += "\nIs this approach sound? " + sgl.select("sound", ["yes", "no"])
    thoughts.join()
    sound = [i for i, v in enumerate(s["sound"]) if v == "yes"]
    s += f"Sound approaches: {[i + 1 for i in sound]}.\nVerdict: " + sgl.gen("verdict", max_tokens=12, stop="\n")
    s += sgl.assistant_end()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--width", type=int, default=3)
    args = ap.parse_args()
    engine = sgl.Engine(model_path=args.model_path, max_total_tokens=16384)
    sgl.set_default_backend(engine)
    state = tree.run(problem="Pack 9 boxes into 3 vans evenly.", width=args.width, temperature=0)
    for i, (thought, sound) in enumerate(zip(state["thought"], state["sound"])):
        print(f"approach {i + 1} ({sound}): {thought!r}")
    print("verdict:", repr(state["verdict"]))
    print(f"cache hit rate: {engine.get_stats()['cache_hit_rate']:.1%}")
    engine.shutdown()


if __name__ == "__main__":
    main()
