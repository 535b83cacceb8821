"""Which ``--model-path`` values name a GGUF file: one small dispatch shared by the loader, the
tokenizer and the start-up checks (no torch, no ``gguf`` import).

A path is served from GGUF when it is a ``.gguf`` file, or a folder that is not an HF checkpoint
(no ``config.json``) and holds exactly one ``.gguf`` file. A folder with several raises
``GGUFPathError`` naming them all.

:func:`check_gguf_header` reads the first 24 bytes only (magic, version, tensor and key counts):
start-up calls it before anything else touches the file, so a file that is not GGUF fails in
milliseconds with one line instead of after a tokenizer conversion.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

GGUF_SUFFIX = ".gguf"
GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)
HEADER_BYTES = 24  # magic, u32 version, u64 tensor count, u64 key-value count
MIN_KV_BYTES = 8 + 4 + 1  # a key's length, the value's type, the smallest value
MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # a name's length, n_dims, the type, the offset


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


def check_gguf_header(path: str | os.PathLike) -> tuple[int, int, int]:
    """``(version, tensor_count, kv_count)`` of the GGUF file at ``path``, after checking its magic,
    its version and that both counts fit the file's size; ``ValueError`` naming the file, the field
    and the problem otherwise."""
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
    if len(head) < 4 or head[:4] != GGUF_MAGIC:
        raise ValueError(f"{path}: magic: not a GGUF file (the first 4 bytes are {head[:4]!r}, not b'GGUF')")
    if len(head) < HEADER_BYTES:
        raise ValueError(f"{path}: header: the file ends after {len(head)} bytes (a GGUF header is "
                         f"{HEADER_BYTES}; truncated?)")
    version, tensor_count, kv_count = struct.unpack_from("<IQQ", head, 4)
    if version not in GGUF_VERSIONS:
        raise ValueError(f"{path}: version: GGUF version {version} is not supported (2 or 3)")
    rest = size - HEADER_BYTES
    if kv_count * MIN_KV_BYTES > rest:
        raise ValueError(f"{path}: kv_count: {kv_count} key-value pairs cannot fit the {rest} bytes after "
                         "the header (corrupt or truncated)")
    if tensor_count * MIN_TENSOR_INFO_BYTES > rest - kv_count * MIN_KV_BYTES:
        raise ValueError(f"{path}: tensor_count: {tensor_count} tensors cannot fit the {rest} bytes after "
                         "the header (corrupt or truncated)")
    return version, tensor_count, kv_count
