"""Few-shot multiple choice with ``select``: one shared 5-shot prompt, each question's choices scored.

``select`` scores every choice by its mean token log-probability after the context (one batched
request per question); ``run_batch`` pre-fills the shared few-shot prompt once for all questions.

    python3 examples/few_shot_select.py [--model-path DIR]
"""

from __future__ import annotations

import argparse

import radixlm as sgl

SHOTS = [("2 + 2", "4"), ("3 + 5", "8"), ("10 - 7", "3"), ("6 + 6", "12"), ("9 - 4", "5")]
FEW_SHOT = "".join(f"Q: {q}\nA: {a}\n\n" for q, a in SHOTS)


@sgl.function
def answer(s, question, choices):
    s += FEW_SHOT + "Q: " + question + "\nA: "
    s += sgl.select("answer", choices)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-path", default=None)
    args = ap.parse_args()
    engine = sgl.Engine(model_path=args.model_path, max_total_tokens=16384)
    sgl.set_default_backend(engine)
    questions = [("4 + 3", ["6", "7", "8", "9"]), ("8 - 5", ["2", "3", "4", "5"]), ("5 + 5", ["9", "10", "11", "12"])]
    states = answer.run_batch([{"question": q, "choices": c} for q, c in questions])
    for (question, choices), st in zip(questions, states):
        scores = st.get_meta_info("answer")["normalized_prompt_logprobs"]
        print(f"{question} -> {st['answer']}  (scores {[round(x, 2) for x in scores]} for {choices})")
    print(f"cache hit rate: {engine.get_stats()['cache_hit_rate']:.1%}")
    engine.shutdown()


if __name__ == "__main__":
    main()
