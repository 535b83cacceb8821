"""System adapters: one token-level ``generate`` contract for every engine under comparison.

``system.generate(prompts, max_new_tokens) -> Generation`` runs greedy decoding with EOS ignored,
so every system does the same token work; ``system.reset()`` drops whatever it cached between
repetitions (radixlm flushes its radix cache; the others keep nothing). :class:`SystemPool`
builds each system once per run and closes them at the end. A system whose dependency is missing
is listed with ``status="not installed"`` rather than faked.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

GREEDY = {"temperature": 0.0, "ignore_eos": True}


@dataclass
class Generation:
    """What one ``generate`` call did: the output ids per prompt and the prompt-token accounts."""

    outputs: list[list[int]]
    prompt_tokens: int
    cached_tokens: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def output_tokens(self) -> int:
        return sum(len(o) for o in self.outputs)


class RadixSystem:
    """radixlm's in-process ``Engine``, with or without the radix cache."""

    def __init__(self, name: str, engine: Any):
        self.name = name
        self.engine = engine

    def generate(self, prompts: list[list[int]], max_new_tokens: int, **params: Any) -> Generation:
        sampling = {**GREEDY, "max_new_tokens": max_new_tokens, **params}
        outs = self.engine.generate(input_ids=prompts, sampling_params=sampling)
        return Generation(outputs=[o["output_ids"] for o in outs],
                          prompt_tokens=sum(o["meta_info"]["prompt_tokens"] for o in outs),
                          cached_tokens=sum(o["meta_info"]["cached_tokens"] for o in outs),
                          extra={"forward_passes": [o["meta_info"].get("forward_passes") for o in outs],
                                 "texts": [o["text"] for o in outs]})

    def reset(self) -> None:
        self.engine.flush_cache()

    def close(self) -> None:
        self.engine.shutdown()


@dataclass
class Unavailable:
    """A system that cannot run here, with the reason reported in the results."""

    name: str
    reason: str
    status: str = "not installed"


class SystemPool:
    """Builds systems by name on first use (engines and models are loaded once per run).

    Names: ``radixlm``, ``radixlm-nocache``, ``hf``, ``hf-prefix``, ``llama.cpp`` (parallel sequences
    over a unified KV cache, float32 GGUF), ``llama.cpp-q8`` (the same on the Q8_0 GGUF) and
    ``llama.cpp-serial`` (``Llama``, one sequence at a time with a saved-state cache).
    ``llamacpp_sweep`` is the numbers of parallel sequences the suites try for the parallel systems.
    """

    NAMES = ("radixlm", "radixlm-nocache", "hf", "hf-prefix", "llama.cpp", "llama.cpp-q8", "llama.cpp-serial")

    def __init__(self, model_path: str, max_total_tokens: int, hf_batch_size: int = 16,
                 llamacpp_sweep: tuple[int, ...] = (8, 16, 32, 64)):
        self.model_path = model_path
        self.max_total_tokens = max_total_tokens
        self.hf_batch_size = hf_batch_size
        self.llamacpp_sweep = llamacpp_sweep
        self._systems: dict[str, Any] = {}
        self._hf_model: Any = None

    def get(self, name: str) -> Any:
        """The system called ``name`` (a ``RadixSystem``, HF or llama.cpp adapter, or ``Unavailable``)."""
        if name not in self.NAMES:
            raise ValueError(f"system must be one of {self.NAMES}, got {name!r}")
        if name not in self._systems:
            self._systems[name] = self._build(name)
        return self._systems[name]

    def engine(self, cache: bool = True) -> Any:
        """The radixlm ``Engine`` behind ``radixlm`` / ``radixlm-nocache``."""
        return self.get("radixlm" if cache else "radixlm-nocache").engine

    def _build(self, name: str) -> Any:
        if name.startswith("radixlm"):
            from radixlm import Engine

            engine = Engine(self.model_path, max_total_tokens=self.max_total_tokens,
                            disable_radix_cache=name == "radixlm-nocache", log_level="error")
            return RadixSystem(name, engine)
        if name in ("hf", "hf-prefix"):
            from suites.hf_systems import HFBatched, HFPrefixReuse

            model, pad_id = self.hf_model()
            cls = HFBatched if name == "hf" else HFPrefixReuse
            return cls(name, model, pad_id, self.hf_batch_size)
        if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("gguf") is None:
            missing = [m for m in ("llama_cpp", "gguf") if importlib.util.find_spec(m) is None]
            return Unavailable(name, f"python module(s) {', '.join(missing)} not installed "
                                     "(pip install 'radixlm[bench]', or build llama_cpp with "
                                     "benchmarks/build_llamacpp.sh)")
        if name == "llama.cpp-serial":
            from suites.llamacpp_system import LlamaCppSystem

            return LlamaCppSystem(name, self.model_path)
        from suites.gguf_files import ensure_gguf
        from suites.llamacpp_batched import LlamaCppParallel

        gguf = ensure_gguf(self.model_path, "q8_0" if name == "llama.cpp-q8" else "f32")
        return LlamaCppParallel(name, gguf, self.llamacpp_sweep)

    def hf_model(self) -> tuple[Any, int]:
        """(HF model, pad id), loaded once per run."""
        if self._hf_model is None:
            import torch
            from transformers import AutoModelForCausalLM
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
            model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32).eval()
            pad = model.generation_config.pad_token_id
            eos = model.generation_config.eos_token_id
            if pad is None:
                pad = eos[0] if isinstance(eos, list) else (eos if eos is not None else 0)
            self._hf_model = (model, int(pad))
        return self._hf_model

    def close(self) -> None:
        for system in self._systems.values():
            if hasattr(system, "close"):
                system.close()
        self._systems.clear()
        self._hf_model = None
