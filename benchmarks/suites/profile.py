"""Profile suite: where one prefill step and one decode step (batch 1 and 64) spend their time.

    python benchmarks/run.py --suite profile --size small

The real ``Engine`` runs the workloads (its ``ModelRunner``, scheduler and sampler); timed wrappers
around the model's parts record per step: the q/k/v, o (+ residual), gate/up (+ SiLU * up) and down
(+ residual) matmuls, attention and the KV store, rotary, norms, the embedding and the LM head, then
the rest of the forward (views, the native layer's call overhead), the runner's batch build and
sampler, and the engine's time outside the runner (scheduling, results). A decode step that runs
the fused native layer (``cpu_native.decode_layer``) reports the phases the layer times itself.
Matmul rows also give achieved GFLOP/s and GB/s (weights + activations per second) against the
matmul rate and read bandwidth measured in the same run (``roofline``). CPU ops are synchronous,
so ``perf_counter`` around a call is its time; a wrapper costs ~1-2 us per call, counted in its part.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from suites import roofline
from suites.context import SuiteContext
from suites.workloads import random_prompts

CONFIGS = (("prefill", 1), ("decode", 1), ("prefill", 64), ("decode", 64))
# a layer's projection -> its row label; gate/up's label covers its SiLU * up (fused natively)
MATMULS = {"qkv_proj": "qkv matmul", "o_proj": "o matmul", "gate_up_proj": "gate_up matmul + SiLU",
           "down_proj": "down matmul"}
NORMS = ("input_layernorm", "post_attention_layernorm", "q_norm", "k_norm")
# parts outside the model forward, in table order after the forward's own parts
OUTSIDE = ("batch build (ForwardBatch)", "sampler", "engine outside the runner")


@dataclass
class Step:
    """One engine step: its kind, size and per-part seconds (plus matmul FLOPs and bytes)."""

    kind: str
    batch_size: int
    tokens: int
    parts: dict[str, float] = field(default_factory=dict)
    flops: dict[str, float] = field(default_factory=dict)
    nbytes: dict[str, float] = field(default_factory=dict)
    run_s: float = 0.0
    forward_s: float = 0.0
    step_s: float = 0.0


def _linear_cost(weight: Any, x: Any) -> tuple[float, float]:
    """(FLOPs, bytes read) of ``x [..., K] @ weight[N, K].T``: the weight once plus the activations."""
    n, k = weight.shape[0], weight.shape[-1]
    rows = x.numel() // x.shape[-1]
    return 2.0 * rows * n * k, n * k * weight.element_size() + rows * (k + n) * x.element_size()


def _weight(module: Any) -> Any:
    """A projection's weight matrix: ``weight`` (float) or ``qweight`` (int8)."""
    weight = getattr(module, "weight", None)
    return weight if weight is not None else module.qweight


class Probes:
    """Timed wrappers on one engine's model parts and runner phases; a context manager (restores all)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.steps: list[Step] = []
        self._undo: list[Callable[[], None]] = []

    def _wrap(self, owner: Any, attr: str, label: str, cost: Callable[..., tuple[float, float]] | None = None) -> None:
        inner = getattr(owner, attr)
        own = vars(owner).get(attr)  # the raw attribute (a classmethod stays one) to put back

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            out = inner(*args, **kwargs)
            step = self.steps[-1] if self.steps else None
            if step is not None:
                step.parts[label] = step.parts.get(label, 0.0) + time.perf_counter() - start
                if cost is not None:
                    flops, nbytes = cost(*args)
                    step.flops[label] = step.flops.get(label, 0.0) + flops
                    step.nbytes[label] = step.nbytes.get(label, 0.0) + nbytes
            return out

        setattr(owner, attr, timed)
        self._undo.append(lambda: setattr(owner, attr, own) if own is not None else delattr(owner, attr))

    def __enter__(self) -> Probes:
        import radixlm.runtime.model.llama as llama
        from radixlm.runtime.model.forward_batch import ForwardBatch

        try:  # absent in engines before the native kernels (a 'before' profile of an older checkout)
            from radixlm.kernels import cpu_native
        except ImportError:
            cpu_native = None

        runner, model = self.engine.runner, self.engine.runner.model
        # label -> (weights of all layers, their bytes, N + K): each step's matmul cost from its token count
        first = model.layers[0]
        self.shapes = {label: (len(model.layers) * _weight(getattr(first, name)).numel(),
                               len(model.layers) * _weight(getattr(first, name)).nbytes,
                               len(model.layers) * sum(_weight(getattr(first, name)).shape))
                       for name, label in MATMULS.items()}
        self._wrap_runner(runner)
        self._wrap(model, "forward", "forward")
        self._wrap(ForwardBatch, "from_spec", OUTSIDE[0])
        self._wrap(llama, "vocab_parallel_embedding", "embedding")
        self._wrap(llama, "parallel_lm_head", "lm head", lambda hidden, weight, *a: _linear_cost(weight, hidden))
        head = model.quantized_lm_head if getattr(model, "quantized_lm_head", None) is not None else None
        if head is not None:
            self._wrap(head, "forward", "lm head", lambda hidden: _linear_cost(head.qweight, hidden))
        self._wrap(llama, "apply_rotary", "rotary")
        self._wrap(model.rotary, "cos_sin", "rotary")
        self._wrap(model.norm, "forward", "norms")
        if cpu_native is not None:
            self._wrap(cpu_native, "rope_store_kv", "rotary + kv store")
            self._wrap_native_layer(cpu_native)
        for layer in model.layers:
            for name in ("qkv_proj", "o_proj", "down_proj"):
                self._wrap(getattr(layer, name), "forward", MATMULS[name])
            if hasattr(layer, "_gate_up_silu"):
                self._wrap(layer, "_gate_up_silu", MATMULS["gate_up_proj"])
            else:  # older engines: the gate/up matmul alone (its SiLU * up counts as "other")
                self._wrap(layer.gate_up_proj, "forward", MATMULS["gate_up_proj"])
            for name in NORMS:
                if getattr(layer, name, None) is not None:
                    self._wrap(getattr(layer, name), "forward", "norms")
            self._wrap(layer.attn.ops, "store_kv", "kv store")
            self._wrap(layer.attn.ops, "decode_attention", "attention")
            self._wrap(layer.attn.ops, "extend_attention", "attention")
        return self

    def _wrap_native_layer(self, cpu_native: Any) -> None:
        """The fused native decode layer times its own phases (``cpu_native.LAYER_PHASES``) into the
        array its step arguments point to; each layer's phases are added to the step's parts."""
        import ctypes

        times = (ctypes.c_double * len(cpu_native.LAYER_PHASES))()
        inner_step, inner_layer = cpu_native.decode_step, cpu_native.decode_layer

        def decode_step(*args: Any, **kwargs: Any) -> Any:
            return inner_step(*args, times=times, **kwargs)

        def decode_layer(*args: Any) -> Any:
            ctypes.memset(times, 0, ctypes.sizeof(times))
            out = inner_layer(*args)
            step = self.steps[-1]
            for label, seconds in zip(cpu_native.LAYER_PHASES, times):
                step.parts[label] = step.parts.get(label, 0.0) + seconds
            return out

        cpu_native.decode_step, cpu_native.decode_layer = decode_step, decode_layer
        self._undo.append(lambda: setattr(cpu_native, "decode_step", inner_step))
        self._undo.append(lambda: setattr(cpu_native, "decode_layer", inner_layer))

    def _wrap_runner(self, runner: Any) -> None:
        inner_run, inner_sample = runner.run, runner._sample

        def run(batch: Any) -> Any:
            spec = batch.spec
            step = Step("decode" if spec.is_decode else "prefill", len(spec.req_pool_indices), len(spec.input_ids))
            for label, (params, nbytes, widths) in self.shapes.items():  # float32 activations in and out
                step.flops[label], step.nbytes[label] = 2.0 * step.tokens * params, nbytes + 4.0 * step.tokens * widths
            self.steps.append(step)
            start = time.perf_counter()
            result = inner_run(batch)
            self.steps[-1].run_s = time.perf_counter() - start
            self.steps[-1].forward_s = result.forward_s
            return result

        def sample(*args: Any) -> Any:
            start = time.perf_counter()
            out = inner_sample(*args)
            step = self.steps[-1]
            step.parts[OUTSIDE[1]] = step.parts.get(OUTSIDE[1], 0.0) + time.perf_counter() - start
            return out

        timers = self.engine._loop.timers
        inner_add = timers.add

        def add(is_decode: bool, bs: int, step_s: float, forward_s: float, *counts: int) -> None:
            if self.steps:
                self.steps[-1].step_s = step_s
            inner_add(is_decode, bs, step_s, forward_s, *counts)

        runner.run, runner._sample, timers.add = run, sample, add
        self._undo += [lambda: delattr(runner, "run"), lambda: delattr(runner, "_sample"),
                       lambda: delattr(timers, "add")]

    def __exit__(self, *exc: Any) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def summarize(steps: list[Step], kind: str) -> dict[str, Any]:
    """Mean per-part seconds of the ``kind`` steps; ``other (in forward)`` and the outside parts derived."""
    chosen = [s for s in steps if s.kind == kind]
    if not chosen:
        raise RuntimeError(f"profile: the workload ran no {kind} step")
    n = len(chosen)
    mean = lambda f: sum(f(s) for s in chosen) / n  # noqa: E731
    labels = [k for k in dict.fromkeys(k for s in chosen for k in s.parts) if k not in ("forward", *OUTSIDE)]
    parts = {k: mean(lambda s, k=k: s.parts.get(k, 0.0)) for k in labels}
    forward = mean(lambda s: s.parts.get("forward", s.forward_s))
    parts["other (in forward)"] = forward - sum(parts.values())
    parts[OUTSIDE[0]] = mean(lambda s: s.parts.get(OUTSIDE[0], 0.0))
    parts[OUTSIDE[1]] = mean(lambda s: s.parts.get(OUTSIDE[1], 0.0))
    run_rest = mean(lambda s: s.run_s) - forward - parts[OUTSIDE[0]] - parts[OUTSIDE[1]]
    parts[OUTSIDE[0]] += max(run_rest, 0.0)  # the runner's own bookkeeping around the forward
    parts[OUTSIDE[2]] = mean(lambda s: s.step_s - s.run_s)
    step = mean(lambda s: s.step_s)
    return {"steps": n, "batch_size": chosen[0].batch_size, "tokens_per_step": mean(lambda s: s.tokens),
            "step_s": step, "forward_s": forward, "parts_s": parts,
            "flops": {k: mean(lambda s, k=k: s.flops.get(k, 0.0)) for k in chosen[0].flops},
            "bytes": {k: mean(lambda s, k=k: s.nbytes.get(k, 0.0)) for k in chosen[0].nbytes},
            "outside_forward_fraction": (step - forward) / step if step else None}


def table(name: str, prof: dict[str, Any], machine: dict[str, Any]) -> list[str]:
    """Markdown lines of one configuration's profile."""
    step, flops_rate, read_bw = prof["step_s"], machine["matmul_gflop_per_s"], machine["read_gb_per_s"]
    lines = [f"#### {name}: {prof['step_s'] * 1e3:.2f} ms/step ({prof['steps']} steps, "
             f"{prof['tokens_per_step']:.0f} tokens/step, batch {prof['batch_size']}); outside the forward "
             f"{prof['outside_forward_fraction']:.1%}", "",
             "| part | ms/step | % of step | GFLOP/s | % of matmul rate | GB/s | % of read bw |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for part, seconds in prof["parts_s"].items():
        cells = ["", "", "", ""]
        if part in prof["flops"] and seconds > 0:
            gflops, gbs = prof["flops"][part] / seconds / 1e9, prof["bytes"][part] / seconds / 1e9
            cells = [f"{gflops:.1f}", f"{gflops / flops_rate:.0%}", f"{gbs:.1f}", f"{gbs / read_bw:.0%}"]
        lines.append(f"| {part} | {seconds * 1e3:.3f} | {seconds / step:.1%} | " + " | ".join(cells) + " |")
    total_f, total_b = sum(prof["flops"].values()), sum(prof["bytes"].values())
    total_s = sum(prof["parts_s"][k] for k in prof["flops"])
    if total_s > 0:
        lines.append(f"| **all matmuls** | {total_s * 1e3:.3f} | {total_s / step:.1%} | {total_f / total_s / 1e9:.1f} "
                     f"| {total_f / total_s / 1e9 / flops_rate:.0%} | {total_b / total_s / 1e9:.1f} "
                     f"| {total_b / total_s / 1e9 / read_bw:.0%} |")
    return lines + [""]


def _workload(vocab: int, kind: str, batch: int, quick: bool) -> tuple[list[list[int]], int]:
    """(prompts, new tokens): prefill 256-token prompts at batch 1, 64-token ones at batch 64 (4,096
    tokens: one step); decode 32-token prompts, 16 new tokens (15 decode steps)."""
    if kind == "prefill":
        length = 32 if quick else (256 if batch == 1 else 64)
        return random_prompts(vocab, batch, length, seed=100 + batch), 1
    return random_prompts(vocab, batch, 32, seed=batch), 4 if quick else 16


def run(ctx: SuiteContext) -> dict[str, Any]:
    system = ctx.pool.get("radixlm")
    engine, vocab = system.engine, system.engine.tokenizer.vocab_size
    configs = [(k, b) for k, b in CONFIGS if not ctx.quick or b == 1]
    ctx.log("profile: measuring roofline")
    machine = roofline.measure(quick=ctx.quick)
    ctx.log(f"  roofline: {machine}")
    rows: dict[str, Any] = {}
    lines = [f"Matmul rate {machine['matmul_gflop_per_s']:.1f} GFLOP/s and read bandwidth "
             f"{machine['read_gb_per_s']:.1f} GB/s, measured in the same run "
             f"({machine['torch_threads']} torch threads).", ""]
    for kind, batch in configs:
        name = f"{kind}-b{batch}"
        prompts, new_tokens = _workload(vocab, kind, batch, ctx.quick)
        system.generate(prompts, new_tokens)  # warm-up: allocator, kernel caches
        system.reset()
        with Probes(engine) as probes:
            system.generate(prompts, new_tokens)
        system.reset()
        prof = summarize(probes.steps, kind)
        ctx.log(f"  {name}: {prof['step_s'] * 1e3:.2f} ms/step")
        rows[name] = {"status": "ok", "median": {"step_ms": prof["step_s"] * 1e3}, "profile": prof}
        lines += table(name, prof, machine)
    return {"workload": {"configs": [f"{k}-b{b}" for k, b in configs]}, "machine": machine,
            "metric": "step_ms", "systems": rows, "table_md": lines, "targets": []}
