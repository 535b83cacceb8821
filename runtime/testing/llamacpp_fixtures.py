"""Where llama.cpp's test fixtures (GGUF vocabularies, chat templates) live once fetched.

The files come from PyPI's ``llama-cpp-python`` sdist; ``tests/llamacpp_assets.py`` downloads and
extracts them under ``$RADIXLM_CACHE/llamacpp-<version>/`` (``vocab/`` and ``templates/``). Serving
code never downloads anything, so this module only locates them and raises ``FixturesMissing``,
naming the prefetch command, when they are not there.
"""

from __future__ import annotations

import os
from pathlib import Path

LLAMACPP_VERSION = "0.3.36"
FETCH_COMMAND = "python tests/llamacpp_assets.py"


class FixturesMissing(FileNotFoundError):
    """A llama.cpp fixture is not in the cache (it has to be pre-fetched with network access)."""


def radixlm_cache() -> Path:
    """``$RADIXLM_CACHE`` or ``~/.cache/radixlm`` (the root of every cached artefact)."""
    return Path(os.environ.get("RADIXLM_CACHE") or Path.home() / ".cache" / "radixlm")


def fixtures_root() -> Path:
    """``$RADIXLM_CACHE/llamacpp-<version>`` (it may not exist)."""
    return radixlm_cache() / f"llamacpp-{LLAMACPP_VERSION}"


def _require(path: Path, what: str) -> Path:
    if not path.is_file():
        raise FixturesMissing(
            f"{what} not found at {path}: the llama.cpp fixtures (llama-cpp-python=={LLAMACPP_VERSION} "
            f"sdist) have to be fetched once with network access: run `{FETCH_COMMAND}`")
    return path


def vocab_gguf(name: str) -> Path:
    """``ggml-vocab-<name>.gguf`` (e.g. ``qwen2``, ``llama-bpe``)."""
    return _require(fixtures_root() / "vocab" / f"ggml-vocab-{name}.gguf", f"vocabulary {name!r}")


def chat_template(name: str) -> str:
    """The text of ``templates/<name>.jinja`` (e.g. ``Qwen-Qwen3-0.6B``)."""
    path = _require(fixtures_root() / "templates" / f"{name}.jinja", f"chat template {name!r}")
    return path.read_text(encoding="utf-8")
