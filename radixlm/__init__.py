"""radixlm: an LLM serving engine for structured, prefix-heavy workloads.

The public facade: the frontend DSL (SGLang-compatible, so ``import radixlm as sgl`` works for
SGLang programs) and the in-process ``Engine``. Names are imported lazily so that ``import radixlm``
stays cheap (no torch until an engine or model is needed).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Engine": "radixlm.runtime.engine",
    "ServerArgs": "radixlm.runtime.server_args",
    "SamplingParams": "radixlm.runtime.sampling_params",
    "function": "radixlm.lang.api",
    "gen": "radixlm.lang.api",
    "gen_int": "radixlm.lang.api",
    "gen_string": "radixlm.lang.api",
    "select": "radixlm.lang.api",
    "image": "radixlm.lang.api",
    "system": "radixlm.lang.api",
    "user": "radixlm.lang.api",
    "assistant": "radixlm.lang.api",
    "system_begin": "radixlm.lang.api",
    "system_end": "radixlm.lang.api",
    "user_begin": "radixlm.lang.api",
    "user_end": "radixlm.lang.api",
    "assistant_begin": "radixlm.lang.api",
    "assistant_end": "radixlm.lang.api",
    "set_default_backend": "radixlm.lang.api",
    "RuntimeEndpoint": "radixlm.lang.api",
    "OpenAI": "radixlm.lang.api",
    "flush_cache": "radixlm.lang.api",
    "get_server_info": "radixlm.lang.api",
    "separate_reasoning": "radixlm.lang.api",
    "video": "radixlm.lang.api",
    "ProgramState": "radixlm.lang.api",
    "token_length_normalized": "radixlm.lang.api",
    "greedy_token_selection": "radixlm.lang.api",
    "unconditional_likelihood_normalized": "radixlm.lang.api",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'radixlm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
