"""Quant suite: int8 weight-only quantization against float32 and against llama.cpp's Q8_0, in one run.

Decode at batch 1 (one 32-token random prompt, 32 new tokens; decode steps only, as the raw suite
times them) for:

* ``radixlm`` — float32, the checkpoint's weights;
* ``radixlm-int8`` — ``--quantization int8`` (float32 activations);
* ``radixlm-int8-bf16`` — ``--quantization int8 --dtype bfloat16`` (on the CPU, torch's vectorized
  int8 kernel, ``_weight_int8pack_mm``, takes bfloat16 activations only);
* ``llama.cpp`` / ``llama.cpp-q8`` — the float32 and Q8_0 GGUFs of the same checkpoint (batch-1
  decode is one sequence on every core: llama.cpp's best configuration for it).

Accuracy, same run: the logits at every position of a few chat prompts (teacher-forced), each
quantized system against the float32 of its own engine — radixlm int8 against radixlm float32,
llama.cpp Q8_0 against llama.cpp float32 — as max |logit diff|, that over the largest |logit|, the
worst row's relative L2 error and the top-1 agreement; and greedy agreement (free-running) of
every system against radixlm float32. On the CPU, the int8 matmul paths per linear shape
(``quant_matmul.py``).
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np
import torch

from suites import quant_matmul
from suites.context import SuiteContext
from suites.measure import agreement, alternate, target
from suites.raw import decode_trial, llamacpp_decode_trial
from suites.systems import RadixSystem
from suites.workloads import chat_openers, random_prompts

RADIX = {"radixlm": {}, "radixlm-int8": {"quantization": "int8"},
         "radixlm-int8-bf16": {"quantization": "int8", "dtype": "bfloat16"}}
LLAMACPP = ("llama.cpp", "llama.cpp-q8")
INT8_ROWS = ("radixlm-int8", "radixlm-int8-bf16")


def _logit_rows_radix(model_path: str, prompts: list[list[int]], **load: Any) -> list[torch.Tensor]:
    """float32 logits ``[len(p), vocab]`` of every prompt position, from a freshly loaded model."""
    from radixlm.runtime.model.forward_batch import ForwardBatch
    from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable
    from radixlm.runtime.model.model_loader import load_model
    from radixlm.runtime.scheduler.batch import BatchSpec

    model, c = load_model(model_path, load.get("dtype", "float32"), "cpu", quantization=load.get("quantization"))
    rows = []
    for ids in prompts:
        n = len(ids)
        pool = KVPool(n + 2, c.num_layers, model.num_kv_heads, c.head_dim, model.norm.weight.dtype, "cpu")
        spec = BatchSpec(False, [0], ids, [0], [n], list(range(1, n + 1)), list(range(n)))
        rows.append(model.forward(ForwardBatch.from_spec(spec, ReqToTokenTable(1, n + 2, "cpu"), "cpu"), pool))
    return rows


def _logit_rows_llamacpp(system: Any, prompts: list[list[int]], vocab: int) -> list[torch.Tensor]:
    from suites.parallel_plan import SeqWork

    rows = []
    for ids in prompts:
        system.reset()
        got = system._run([SeqWork(0, ids, 0, tuple(range(len(ids))))])  # every position's logits
        rows.append(torch.from_numpy(np.stack([got[(0, i)] for i in range(len(ids))]))[:, :vocab])
    system.reset()
    return rows


def _compare(ref: list[torch.Tensor], got: list[torch.Tensor]) -> dict[str, float]:
    """max |diff|, max |diff| / max |ref|, worst row's ||diff|| / ||ref||, top-1 agreement."""
    diff = max((a - b).abs().max().item() for a, b in zip(ref, got))
    peak = max(a.abs().max().item() for a in ref)
    rel = max(((a - b).norm(dim=-1) / a.norm(dim=-1)).max().item() for a, b in zip(ref, got))
    same = sum((a.argmax(-1) == b.argmax(-1)).sum().item() for a, b in zip(ref, got))
    return {"max_abs_logit_diff": diff, "max_rel_logit_diff": diff / peak, "worst_row_rel_l2": rel,
            "top1_agreement": same / sum(len(a) for a in ref)}


def _accuracy(ctx: SuiteContext, ready: dict[str, Any], prompts: list[list[int]], vocab: int) -> dict[str, Any]:
    ref = _logit_rows_radix(ctx.model_path, prompts)
    out = {name: _compare(ref, _logit_rows_radix(ctx.model_path, prompts, **RADIX[name])) for name in INT8_ROWS}
    if "llama.cpp" in ready:
        lc_ref = _logit_rows_llamacpp(ready["llama.cpp"], prompts, vocab)
        out["llama.cpp"] = _compare(ref, lc_ref)  # the adapters agree: float32 against float32
        if "llama.cpp-q8" in ready:
            out["llama.cpp-q8"] = _compare(lc_ref, _logit_rows_llamacpp(ready["llama.cpp-q8"], prompts, vocab))
    return out


def run(ctx: SuiteContext) -> dict[str, Any]:
    from radixlm.runtime.model.model_config import ModelConfig
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    from radixlm import Engine

    cfg, tok = ModelConfig.from_path(ctx.model_path), Tokenizer(ctx.model_path)
    ready, missing = ctx.pick(LLAMACPP)
    texts = chat_openers(tok, ctx.scale(4, 2))
    ctx.log("quant: logits against float32")
    accuracy = _accuracy(ctx, ready, texts, cfg.vocab_size)
    systems = {name: RadixSystem(name, Engine(ctx.model_path, max_total_tokens=4096, log_level="error", **kw))
               for name, kw in RADIX.items()}
    try:
        new_tokens = ctx.scale(32, 8)
        greedy = {n: s.generate(texts, ctx.scale(16, 4)).outputs for n, s in {**systems, **ready}.items()}
        prompt = random_prompts(cfg.vocab_size, 1, 32, seed=1)
        trials = {n: decode_trial(s, prompt, new_tokens) for n, s in systems.items()}
        trials.update({n: llamacpp_decode_trial(p, prompt, new_tokens) for n, p in ready.items()})
        warm = {n: decode_trial(s, random_prompts(cfg.vocab_size, 1, 8), 2) for n, s in systems.items()}
        warm.update({n: llamacpp_decode_trial(p, random_prompts(cfg.vocab_size, 1, 8), 2) for n, p in ready.items()})
        runs = alternate(trials, ctx.reps, warmups=warm, log=ctx.log)
    finally:
        for s in systems.values():
            s.close()
    matmul = []
    if not torch.cuda.is_available():
        ctx.log("quant: CPU int8 matmul paths")
        matmul = quant_matmul.measure(cfg, ctx.scale((1, 4, 64), (1,)), (torch.float32, torch.bfloat16), ctx.log)
    rows = _rows(runs, missing)
    return {"workload": {"decode_prompt_len": 32, "decode_new_tokens": new_tokens, "accuracy_prompts": len(texts)},
            "metric": "decode_tok_per_s", "systems": rows, "accuracy": accuracy, "matmul": matmul,
            "greedy_agreement": agreement(greedy, "radixlm"), "targets": _targets(rows),
            "table_md": _markdown(rows, accuracy, matmul)}


def _rows(runs: dict[str, list[dict[str, Any]]], missing: dict[str, str]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name, reps in runs.items():
        rate = statistics.median(r["decode_tok_per_s"] for r in reps)
        rows[name] = {"status": "ok", "runs": reps, "median": {"decode_tok_per_s": rate,
                                                               "decode_ms_per_token": 1000 / rate}}
    rows.update({n: {"status": "not installed", "reason": r} for n, r in missing.items()})
    return rows


def _rate(rows: dict[str, Any], name: str) -> float | None:
    row = rows.get(name, {})
    return row["median"]["decode_tok_per_s"] if row.get("status") == "ok" else None


def _ratio(rows: dict[str, Any], num: str, den: str) -> float | None:
    a, b = _rate(rows, num), _rate(rows, den)
    return a / b if a and b else None


def _targets(rows: dict[str, Any]) -> list[dict[str, Any]]:
    """The target: batch-1 decode with int8 weights >= 0.9x llama.cpp Q8_0 (tok/s ratio, same run)."""
    return [target(f"decode batch 1 tok/s {name} / llama.cpp-q8", _ratio(rows, name, "llama.cpp-q8"), 0.9)
            for name in INT8_ROWS]


def _markdown(rows: dict[str, Any], accuracy: dict[str, Any], matmul: list[dict[str, Any]]) -> list[str]:
    fmt = lambda v, d=2: "-" if v is None else f"{v:,.{d}f}"  # noqa: E731
    lines = ["| system | decode ms/token | tok/s | / radixlm float32 | / llama.cpp-q8 | max abs logit diff "
             "| / max abs logit | worst row rel L2 | top-1 agreement |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in rows.items():
        if row.get("status") != "ok":
            lines.append(f"| {name} | {row.get('status')}: {row.get('reason', '')} | | | | | | | |")
            continue
        acc = accuracy.get(name, {})
        lines.append(f"| {name} | {fmt(row['median']['decode_ms_per_token'], 1)} | {fmt(_rate(rows, name), 1)} "
                     f"| {fmt(_ratio(rows, name, 'radixlm'))}x | {fmt(_ratio(rows, name, 'llama.cpp-q8'))}x "
                     f"| {fmt(acc.get('max_abs_logit_diff'), 4)} | {fmt(acc.get('max_rel_logit_diff'), 4)} "
                     f"| {fmt(acc.get('worst_row_rel_l2'), 4)} | {fmt(acc.get('top1_agreement'), 3)} |")
    lines += ["", "Logit columns: radixlm int8 rows against radixlm float32; llama.cpp against radixlm float32; "
              "llama.cpp-q8 against llama.cpp float32 (teacher-forced, every position of the accuracy prompts)."]
    if matmul:
        lines += ["", "CPU int8 matmul paths, microseconds per call (fastest int8 path in bold):", "",
                  *quant_matmul.markdown(matmul)]
    return lines
