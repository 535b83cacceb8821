"""Triton int8 weight-only matmul: ``y = x @ (w_int8 * scale[:, None]).T (+ bias)``.

One program per ``[BLOCK_M, BLOCK_N]`` tile of the output. It walks K in ``BLOCK_K`` steps: loads
the activations ``[BLOCK_M, BLOCK_K]`` and the int8 weight tile ``[BLOCK_N, BLOCK_K]``, converts
the weights to the activations' dtype (exact: ``|q| <= 127`` fits every float format) and
accumulates ``tl.dot`` in float32. The per-output-channel scale factors out of the sum over K, so
it is applied once to the accumulator, then the bias; the tile is stored in ``x``'s dtype. The
weights stream from memory as int8, a quarter of the float32 bytes (half of bfloat16's), which is
what bounds decode. ``int8_matmul_ref.int8_matmul_ref`` is the reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from radixlm.kernels.int8_matmul_ref import check_int8_matmul
from radixlm.kernels.triton_mode import check_device, dot_in_f32


@triton.jit
def _int8_matmul_kernel(X, W, Scale, Bias, Out, M, N, K,
                        stride_xm, stride_xk, stride_wn, stride_wk, stride_om,
                        HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, DOT_F32: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        mask_k = k < K
        x = tl.load(X + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=mask_m[:, None] & mask_k[None, :], other=0.0)  # [BLOCK_M, BLOCK_K]
        w = tl.load(W + offs_n[:, None] * stride_wn + k[None, :] * stride_wk,
                    mask=mask_n[:, None] & mask_k[None, :], other=0)  # [BLOCK_N, BLOCK_K] int8
        if DOT_F32:
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        else:
            w = w.to(x.dtype)
        acc = tl.dot(x, tl.trans(w), acc, input_precision=PRECISION)
    scale = tl.load(Scale + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    acc = acc * scale[None, :]
    if HAS_BIAS:
        acc = acc + tl.load(Bias + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    tl.store(Out + offs_m[:, None] * stride_om + offs_n[None, :], acc.to(Out.dtype.element_ty),
             mask=mask_m[:, None] & mask_n[None, :])


def _blocks(m: int, n: int, k: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): 16 rows for decode-sized batches (``tl.dot``'s minimum), more for prefill."""
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    return block_m, 64, 64 if k <= 64 else 128


def int8_matmul(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    """x ``[M, K]`` float, weight int8 ``[N, K]``, scale ``[N]`` (bias ``[N]``) -> ``[M, N]`` in x's dtype.

    Semantics of ``int8_matmul_ref``: float32 accumulation, the scale applied per output column.
    """
    check_int8_matmul(x, weight, scale, bias)
    check_device("x", x)
    (m, k), n = x.shape, weight.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    block_m, block_n, block_k = _blocks(m, n, k)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _int8_matmul_kernel[grid](
        x, weight, scale, bias if bias is not None else scale, out, m, n, k,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), out.stride(0),
        HAS_BIAS=bias is not None, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        PRECISION="ieee" if x.dtype == torch.float32 else "tf32", DOT_F32=dot_in_f32(x.dtype),
        num_warps=4, num_stages=3,
    )
    return out
