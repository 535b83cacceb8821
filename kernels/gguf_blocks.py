"""GGUF weights multiplied in their own quantization: ``block_linear``, ``block_rows``, ``dequantize``.

A ``BlockWeight`` holds a GGUF tensor's raw blocks (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
Q4_K, Q5_K, Q6_K). ``block_linear`` runs the native kernels (``gguf_blocks_native``) where they
build (Linux x86-64 with AVX2), else the reference (``gguf_blocks_ref``: the ``gguf`` package's
dequantization and a torch matmul). ``block_rows`` and ``dequantize`` are the ``gguf`` package's own
dequantization (on the selected rows only for ``block_rows``), so they equal it exactly.

``BlockWeight``: one GGUF tensor kept in its own quantization, as the block kernels take it. The
raw bytes of a GGUF tensor of logical shape ``(out_features, in_features)`` are ``out_features``
rows of ``in_features / block_size`` blocks of ``type_size`` bytes each (GGUF's ``ne[0]`` is
``in_features``, the fastest-varying dimension). Construction checks the dtype, layout and sizes
against ``gguf.GGML_QUANT_SIZES`` (``TypeError``/``ValueError`` naming the field).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from radixlm.kernels import gguf_blocks_native
from radixlm.kernels.gguf_blocks_ref import block_linear_ref, block_rows_ref, dequantize_ref

__all__ = ["BlockWeight", "SUPPORTED_TYPES", "block_linear", "block_rows", "dequantize", "row_bytes"]

_T = GGMLQuantizationType
# the types the kernels multiply in their own format (the real Q4_K_M files use F32, Q5_0, Q8_0, Q4_K, Q6_K)
SUPPORTED_TYPES: frozenset[int] = frozenset(int(t) for t in (
    _T.F32, _T.F16, _T.BF16, _T.Q8_0, _T.Q4_0, _T.Q4_1, _T.Q5_0, _T.Q5_1, _T.Q4_K, _T.Q5_K, _T.Q6_K))


def row_bytes(qtype: int, in_features: int) -> int:
    """Bytes of one row of ``in_features`` values of type ``qtype`` (``ValueError`` if not whole blocks)."""
    block, size = GGML_QUANT_SIZES[_T(qtype)]
    if in_features % block:
        raise ValueError(f"in_features={in_features} is not a multiple of {_T(qtype).name}'s block of {block}")
    return in_features // block * size


@dataclass(frozen=True)
class BlockWeight:
    """A weight in a GGUF block format.

    ``qtype``: a ``gguf.GGMLQuantizationType`` value in ``SUPPORTED_TYPES``; ``data``: uint8
    ``(rows, row_bytes)``, C-contiguous, the file's bytes (may be a view on an mmap); ``shape``: the
    logical ``(out_features, in_features)``.
    """

    qtype: int
    data: torch.Tensor
    shape: tuple[int, int]

    def __post_init__(self) -> None:
        if int(self.qtype) not in SUPPORTED_TYPES:
            name = _T(self.qtype).name if self.qtype in _T._value2member_map_ else str(self.qtype)
            raise ValueError(f"qtype {name} is not supported; supported: "
                             f"{sorted(_T(t).name for t in SUPPORTED_TYPES)}")
        object.__setattr__(self, "qtype", int(self.qtype))
        if not isinstance(self.data, torch.Tensor) or self.data.dtype != torch.uint8:
            raise TypeError(f"data must be a uint8 torch.Tensor, got {getattr(self.data, 'dtype', type(self.data))}")
        if len(self.shape) != 2 or min(self.shape) < 1:
            raise ValueError(f"shape must be (out_features, in_features) >= 1, got {self.shape}")
        object.__setattr__(self, "shape", (int(self.shape[0]), int(self.shape[1])))
        expected = (self.shape[0], row_bytes(self.qtype, self.shape[1]))
        if tuple(self.data.shape) != expected:
            raise ValueError(f"data must be {expected} bytes for {_T(self.qtype).name} of shape {self.shape}, "
                             f"got {tuple(self.data.shape)}")
        if self.data.device.type != "cpu" or not self.data.is_contiguous():
            raise ValueError("data must be a C-contiguous CPU tensor")

    @property
    def type_name(self) -> str:
        """The type's GGUF name, e.g. ``"Q4_K"``."""
        return _T(self.qtype).name

    @classmethod
    def from_float(cls, weight: torch.Tensor, qtype: int) -> BlockWeight:
        """Quantize a float ``[out, in]`` weight with ``gguf.quants.quantize`` (the types it can write)."""
        import numpy as np
        from gguf import quants

        raw = quants.quantize(weight.detach().float().numpy(), _T(qtype))
        raw = np.ascontiguousarray(raw).view(np.uint8).reshape(weight.shape[0], -1)
        return cls(qtype, torch.from_numpy(raw.copy()), tuple(weight.shape))


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
