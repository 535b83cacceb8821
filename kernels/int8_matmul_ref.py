"""The torch reference of the int8 weight-only matmul, and the argument checks every implementation shares.

``y = x @ (weight * scale[:, None]).T (+ bias)``: ``weight`` int8 ``[N, K]`` (one row per output
feature), ``scale`` float ``[N]`` (one per output channel), ``x`` float ``[M, K]``. The reference
dequantizes in float32 and casts the result to ``x``'s dtype; it imports no triton.
"""

from __future__ import annotations

import torch
from radixlm.kernels.contract import FLOAT_DTYPES


def int8_matmul_ref(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """``[M, K] x int8 [N, K] -> [M, N]`` in ``x``'s dtype, computed in float32 (the obviously correct one)."""
    check_int8_matmul(x, weight, scale, bias)
    w = weight.float() * scale.float()[:, None]  # [N, K] dequantized
    y = x.float() @ w.T  # [M, N]
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def check_int8_matmul(x: object, weight: object, scale: object, bias: object | None) -> None:
    """``TypeError`` (type, dtype) or ``ValueError`` (shape, stride, device) naming the argument."""
    for name, t in (("x", x), ("weight", weight), ("scale", scale), ("bias", bias)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"x must be float32, float16 or bfloat16, got {x.dtype}")
    if weight.dtype != torch.int8:
        raise TypeError(f"weight must be int8, got {weight.dtype}")
    if scale.dtype not in FLOAT_DTYPES:
        raise TypeError(f"scale must be a float tensor, got {scale.dtype}")
    if x.dim() != 2 or weight.dim() != 2:
        raise ValueError(f"x must be [M, K] and weight [N, K], got {tuple(x.shape)} and {tuple(weight.shape)}")
    if x.shape[1] != weight.shape[1]:
        raise ValueError(f"x has K={x.shape[1]} input features but weight has {weight.shape[1]}")
    if scale.shape != (weight.shape[0],):
        raise ValueError(f"scale must be [N={weight.shape[0]}], got {tuple(scale.shape)}")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"bias must be [N={weight.shape[0]}], got {tuple(bias.shape)}")
    for name, t in (("weight", weight), ("scale", scale), ("bias", bias)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but x is on {x.device}; all inputs must share a device")
