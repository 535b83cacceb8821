"""GGUF weights multiplied in their own quantization: ``block_linear``, ``block_rows``, ``dequantize``.

A ``BlockWeight`` holds a GGUF tensor's raw blocks (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
Q4_K, Q5_K, Q6_K). ``block_linear`` runs the native kernels (``gguf_blocks_native``) where they
build (Linux x86-64 with AVX2), else the reference (``gguf_blocks_ref``: the ``gguf`` package's
dequantization and a torch matmul). ``block_rows`` and ``dequantize`` are the ``gguf`` package's own
dequantization (on the selected rows only for ``block_rows``), so they equal it exactly.
"""

from __future__ import annotations

import torch
from radixlm.kernels import gguf_blocks_native
from radixlm.kernels.gguf_block_weight import SUPPORTED_TYPES, BlockWeight, row_bytes
from radixlm.kernels.gguf_blocks_ref import block_linear_ref, block_rows_ref, dequantize_ref

__all__ = ["BlockWeight", "SUPPORTED_TYPES", "block_linear", "block_rows", "dequantize", "row_bytes"]


def _check_x(x: torch.Tensor, w: BlockWeight, bias: torch.Tensor | None) -> None:
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise TypeError(f"x must be a float32 torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.device.type != "cpu":
        raise ValueError(f"x must be on the CPU, got {x.device}")
    if x.dim() < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"x must be (..., {w.shape[1]}) for a weight of shape {w.shape}, got {tuple(x.shape)}")
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.shape != (w.shape[0],)):
        raise ValueError(f"bias must be a tensor of shape ({w.shape[0]},), got {getattr(bias, 'shape', bias)}")


def block_linear(x: torch.Tensor, w: BlockWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x (..., in) @ W.T (+ bias)`` -> float32 ``(..., out)``, W the dequantized ``w``.

    The native kernels quantize each row of x to 8-bit blocks of 32 for the integer dot products of
    the quantized types (as llama.cpp does); see ``gguf_blocks_native`` for the error this adds.
    """
    _check_x(x, w, bias)
    if gguf_blocks_native.available():
        x2 = x.reshape(-1, w.shape[1]).contiguous()
        y = gguf_blocks_native.linear(x2, w, None if bias is None else bias.float().contiguous())
        return y.reshape(*x.shape[:-1], w.shape[0])
    return block_linear_ref(x, w, bias)


def block_rows(w: BlockWeight, ids: torch.Tensor) -> torch.Tensor:
    """The embedding lookup: rows ``ids`` (integer tensor, any shape) of the dequantized weight -> float32
    ``(ids.numel(), in)``. ``IndexError`` names an id out of range."""
    if not isinstance(ids, torch.Tensor) or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise TypeError(f"ids must be an integer torch.Tensor, got {getattr(ids, 'dtype', type(ids).__name__)}")
    flat = ids.reshape(-1).to(torch.int64)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= w.shape[0]):
        bad = flat[(flat < 0) | (flat >= w.shape[0])][0]
        raise IndexError(f"ids: {int(bad)} is out of range for {w.shape[0]} rows")
    return block_rows_ref(w, flat)


def dequantize(w: BlockWeight) -> torch.Tensor:
    """The whole weight as float32 ``(out, in)`` (the ``gguf`` package's dequantization)."""
    return dequantize_ref(w)
