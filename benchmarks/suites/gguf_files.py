"""The GGUF files llama.cpp runs, built once per checkpoint and kept beside it.

``f32`` is the checkpoint converted by ``gguf_convert.py``; ``q8_0`` and ``q4_k_m`` are that file
quantized by llama.cpp itself (``llama_model_quantize`` with ``LLAMA_FTYPE_MOSTLY_Q8_0``: blocks of 32
int8 weights with one scale each; ``LLAMA_FTYPE_MOSTLY_Q4_K_M``: Q4_K super-blocks with Q6_K for half of
the attention-value and feed-forward-down tensors and the output; 1-D tensors such as norms kept in
float32), the same as ``llama-quantize ... Q8_0`` / ``Q4_K_M``.
Each file is written under a temporary name and renamed into place, so a killed run leaves none half-made.
"""

from __future__ import annotations

import os
from pathlib import Path

KINDS = ("f32", "q8_0", "q4_k_m")
_FTYPES = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}


def gguf_path_for(model_path: str, kind: str = "f32") -> Path:
    """``<checkpoint parent>/gguf/<checkpoint dir name>-<kind>.gguf``."""
    if kind not in KINDS:
        raise ValueError(f"GGUF kind must be one of {KINDS}, got {kind!r}")
    model_dir = Path(model_path).resolve()
    return model_dir.parent / "gguf" / f"{model_dir.name}-{kind}.gguf"


def _quantize(src: Path, dst: Path, kind: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, _FTYPES[kind])
    params.nthread = os.cpu_count() or 1
    status = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if status != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {dst}, {kind}) returned {status}")


def ensure_gguf(model_path: str, kind: str = "f32") -> Path:
    """The ``kind`` GGUF of ``model_path``, building it (and the f32 file it starts from) when missing."""
    path = gguf_path_for(model_path, kind)
    if path.exists():
        return path
    source = ensure_gguf(model_path, "f32") if kind != "f32" else None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        if source is None:
            from suites.gguf_convert import convert

            convert(model_path, tmp)
        else:
            _quantize(source, tmp, kind)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
