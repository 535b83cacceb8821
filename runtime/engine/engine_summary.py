"""What an engine loaded and how it runs, as the one start-up line ``radixlm serve`` prints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from radixlm.runtime.model.weight_stats import parameter_count, threads, weight_format


@dataclass(frozen=True)
class EngineSummary:
    """The facts of a loaded engine a user checks first."""

    model: str  # ORG/NAME for a hub snapshot, else the checkpoint's folder or file name
    architecture: str
    parameters: int  # weights' logical elements (a tied embedding counted once)
    weight_format: str  # "float32", "bfloat16", "int8 (weight-only)", "GGUF Q5_0 60%, Q8_0 27%, ...", ...
    device: str
    threads: int
    kv_tokens: int  # KV-cache capacity, in tokens
    max_running_requests: int
    grammar_backend: str
    sampling_defaults: str = ""  # SamplingDefaults.describe(): what an unset temperature etc. become

    def line(self) -> str:
        """One line: ``Qwen/Qwen2.5-0.5B (qwen2, 494M parameters, int8 (weight-only) weights) on cpu ...``."""
        where = f"{self.device} with {self.threads} thread{'s' * (self.threads != 1)}"
        return (f"{self.model} ({self.architecture}, {count(self.parameters)} parameters, {self.weight_format} "
                f"weights) on {where}; KV cache {self.kv_tokens:,} tokens; up to {self.max_running_requests} "
                f"running requests; grammar backend {self.grammar_backend}"
                + (f"; sampling defaults {self.sampling_defaults}" if self.sampling_defaults else ""))


def summarize(model_name: str, args: Any, runner: Any, kv_tokens: int, sampling_defaults: str = "") -> EngineSummary:
    """The summary of an engine from its ``ServerArgs`` and ``ModelRunner``."""
    return EngineSummary(
        model=model_name, architecture=runner.model_config.architecture, parameters=parameter_count(runner.model),
        weight_format=weight_format(args.quantization, runner.dtype, runner.model), device=str(runner.device),
        threads=threads(), kv_tokens=kv_tokens, max_running_requests=args.max_running_requests,
        grammar_backend=args.grammar_backend, sampling_defaults=sampling_defaults)


def count(n: int) -> str:
    """``494M``, ``1.24B``, ``8.5K``: a parameter count as people write it."""
    for unit, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            value = n / size
            return f"{value:.3g}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return str(n)
