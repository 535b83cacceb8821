"""Few-shot select suite: a shared 5-shot prompt + one question, 4 choices scored by ``select``.

radixlm runs the DSL program with ``run_batch`` (the 5-shot prefix is pre-filled once and every
choice's scoring request reuses the context from the radix cache); ``radixlm-nocache`` runs the
same program on the cache-less engine. ``hf`` scores the same choices the way an HF user would:
one forward over every (context + choice) sequence, mean log-probability of the choice tokens.
``llama.cpp`` / ``llama.cpp-q8`` score the same rows in llama.cpp's best configuration: the shared
5-shot prefix prefilled once and shared with every (question, choice) sequence, the sequences
evaluated in parallel in batched ``llama_decode`` calls (the number of parallel sequences swept).
Throughput: questions per second.
"""

from __future__ import annotations

from typing import Any

import torch

from suites.context import SuiteContext
from suites.measure import alternate, summarize, sweep_parallel
from suites.workloads import few_shot_prefix, few_shot_questions

SYSTEMS = ("radixlm", "radixlm-nocache", "hf", "llama.cpp", "llama.cpp-q8")


def _program():
    import radixlm as sgl

    @sgl.function
    def answer(s, prefix, question, choices):
        s += prefix + "Question: " + question + "\nChoices: " + ", ".join(choices) + "\nAnswer: "
        s += sgl.select("answer", choices)

    return answer


def dsl_trial(engine: Any, batch: list[dict[str, Any]], prefill: bool, picks: list):
    """Run the select program over ``batch`` on ``engine``; the picks land in ``picks``."""
    from radixlm.lang.backends import EngineBackend

    program, backend = _program(), EngineBackend(engine)

    def trial() -> dict[str, Any]:
        states = program.run_batch(batch, backend=backend, prefill_prefix=prefill, temperature=0)
        picks[:] = [st["answer"] for st in states]
        return {"items": len(batch)}
    return trial


def choice_rows(tokenizer: Any, batch: list[dict[str, Any]]) -> list[tuple[int, str, list[int], int]]:
    """(question index, choice, ids of context + choice, first scored position) for every choice."""
    rows = []
    for q, item in enumerate(batch):
        context = item["prefix"] + "Question: " + item["question"] + "\nChoices: " + ", ".join(item["choices"]) \
            + "\nAnswer: "
        ctx_ids = tokenizer.encode(context, add_special_tokens=True)
        for choice in item["choices"]:
            ids = tokenizer.encode(context + choice, add_special_tokens=True)
            start = next((i for i, (a, b) in enumerate(zip(ctx_ids, ids)) if a != b), len(ctx_ids))
            rows.append((q, choice, ids, max(1, min(start, len(ids) - 1))))
    return rows


def _pick(rows: list[tuple[int, str, list[int], int]], scores: list[float], questions: int) -> list[str]:
    """Each question's highest-scoring choice."""
    best: dict[int, tuple[float, str]] = {}
    for (q, choice, _, _), score in zip(rows, scores):
        if q not in best or score > best[q][0]:
            best[q] = (score, choice)
    return [best[q][1] for q in range(questions)]


def llamacpp_trial(system: Any, tokenizer: Any, batch: list[dict[str, Any]], picks: list):
    """Score every choice with llama.cpp's parallel sequences over the shared 5-shot prefix."""
    rows = choice_rows(tokenizer, batch)

    def trial() -> dict[str, Any]:
        picks[:] = _pick(rows, system.score([(ids, start) for _, _, ids, start in rows]), len(batch))
        return {"items": len(batch)}
    return trial


def hf_trial(model: Any, tokenizer: Any, batch: list[dict[str, Any]], per_forward: int, picks: list):
    """Score every choice with HF forwards (``per_forward`` questions per right-padded batch)."""
    rows = choice_rows(tokenizer, batch)

    def trial() -> dict[str, Any]:
        scores: dict[int, list[tuple[float, str]]] = {}
        step = per_forward * 4
        for lo in range(0, len(rows), step):
            chunk = rows[lo:lo + step]
            width = max(len(r[2]) for r in chunk)
            ids = torch.zeros((len(chunk), width), dtype=torch.long)  # [rows, width], right-padded
            mask = torch.zeros_like(ids)
            for i, r in enumerate(chunk):
                ids[i, :len(r[2])] = torch.tensor(r[2])
                mask[i, :len(r[2])] = 1
            with torch.inference_mode():
                logp = torch.log_softmax(model(ids, attention_mask=mask).logits.float(), dim=-1)
            for i, (q, choice, seq, start) in enumerate(chunk):
                targets = torch.tensor(seq[start:])
                lp = logp[i, start - 1:len(seq) - 1].gather(1, targets[:, None]).mean().item()
                scores.setdefault(q, []).append((lp, choice))
        picks[:] = [max(scores[q], key=lambda x: x[0])[1] for q in range(len(batch))]
        return {"items": len(batch)}
    return trial


def run(ctx: SuiteContext) -> dict[str, Any]:
    num = ctx.scale(64, 8)
    prefix = few_shot_prefix()
    batch = [{"prefix": prefix, "question": q, "choices": c} for q, c in few_shot_questions(num)]
    ready, missing = ctx.pick(SYSTEMS)
    ctx.log(f"few_shot: {num} questions x 4 choices, 5-shot prefix")
    picks: dict[str, list] = {n: [] for n in ready}
    trials, warm = {}, {}
    for name, system in ready.items():
        if name.startswith("radixlm"):
            trials[name] = dsl_trial(system.engine, batch, name == "radixlm", picks[name])
            warm[name] = dsl_trial(system.engine, batch[:2], name == "radixlm", [])
        elif name.startswith("llama.cpp"):
            trials[name] = llamacpp_trial(system, ctx.tokenizer, batch, picks[name])
            warm[name] = llamacpp_trial(system, ctx.tokenizer, batch[:2], [])
        else:
            model = ctx.pool.hf_model()[0]
            trials[name] = hf_trial(model, ctx.tokenizer, batch, 16, picks[name])
            warm[name] = hf_trial(model, ctx.tokenizer, batch[:2], 16, [])
    for name, trial in warm.items():
        trial()  # before the sweep too, so its first setting is not the one paying the cold start
        ctx.log(f"  warm-up {name} done")
    swept = sweep_parallel(ready, trials, "items_per_s", 4 * num, log=ctx.log)  # one sequence per choice
    runs = alternate(trials, ctx.reps, resets={n: s.reset for n, s in ready.items()}, log=ctx.log)
    systems = summarize(runs, "radixlm", metric="items_per_s", unavailable=missing)
    base = picks.get("radixlm")
    agreement = {n: sum(a == b for a, b in zip(base, p)) / len(base) for n, p in picks.items()
                 if base and n != "radixlm" and p}
    return {"workload": {"questions": num, "choices": 4, "shots": 5}, "metric": "items_per_s",
            "systems": systems, "targets": [], "agreement_with_radixlm": agreement, "parallel_sweep": swept}
