"""The reference of the GGUF block matmul: the ``gguf`` package's dequantization, then a torch matmul.

Obviously correct and slow (the whole weight is dequantized to float32 on every call); the native
kernels (``gguf_blocks_native``) are tested against it, and it is the path where they cannot run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from gguf import GGMLQuantizationType, quants

if TYPE_CHECKING:  # gguf_blocks imports this module
    from radixlm.kernels.gguf_blocks import BlockWeight


def dequantize_rows_ref(qtype: int, raw: np.ndarray) -> torch.Tensor:
    """Raw rows ``uint8 [rows, row_bytes]`` of type ``qtype`` -> float32 ``[rows, in_features]``."""
    values = quants.dequantize(np.ascontiguousarray(raw), GGMLQuantizationType(qtype))
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))


def dequantize_ref(w: BlockWeight) -> torch.Tensor:
    """The whole weight as float32 ``[out_features, in_features]``."""
    return dequantize_rows_ref(w.qtype, w.data.numpy()).reshape(w.shape)


def block_linear_ref(x: torch.Tensor, w: BlockWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x (..., in) @ dequantize(w).T (+ bias)`` -> float32 ``(..., out)``."""
    y = x.float() @ dequantize_ref(w).T
    return y + bias.float() if bias is not None else y


def block_rows_ref(w: BlockWeight, ids: torch.Tensor) -> torch.Tensor:
    """Rows ``ids`` of the dequantized weight (an embedding lookup) -> float32 ``[len(ids), in]``."""
    rows = w.data.numpy()[ids.to(torch.int64).reshape(-1).numpy()]
    return dequantize_rows_ref(w.qtype, rows).reshape(-1, w.shape[1])
