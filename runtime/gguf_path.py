"""Which ``--model-path`` values name a GGUF file: one small dispatch shared by the loader, the
tokenizer and the start-up checks (no torch, no ``gguf`` import).

A path is served from GGUF when it is a ``.gguf`` file, or a folder that is not an HF checkpoint
(no ``config.json``) and holds exactly one ``.gguf`` file. A folder with several raises
``GGUFPathError`` naming them all.
"""

from __future__ import annotations

import os
from pathlib import Path

GGUF_SUFFIX = ".gguf"


class GGUFPathError(ValueError):
    """A model path that points at GGUF files but not at exactly one of them."""


def gguf_file(model_path: str | os.PathLike | None) -> Path | None:
    """The GGUF file ``model_path`` names, or None when it is not a GGUF model (an HF folder, a missing path)."""
    if model_path is None:
        return None
    path = Path(model_path)
    if path.is_file():
        return path if path.suffix.lower() == GGUF_SUFFIX else None
    if not path.is_dir() or (path / "config.json").is_file():
        return None
    found = sorted(p for p in path.iterdir() if p.suffix.lower() == GGUF_SUFFIX and p.is_file())
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise GGUFPathError(f"model path {str(path)!r} holds {len(found)} GGUF files ({names}); pass one "
                            "of them as the model path")
    return found[0] if found else None
