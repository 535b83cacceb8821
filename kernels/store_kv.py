"""Triton scatter of the new tokens' K/V into their pool slots.

One program per new token copies its K row and V row (``num_kv_heads * head_dim`` values each) in
one kernel launch, casting to the pool's dtype. The inputs may be strided views (K and V split out
of a fused QKV projection); the pools must be contiguous rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from radixlm.kernels.triton_mode import check_device
from radixlm.kernels.validate import check_store_kv


@triton.jit
def _store_kv_kernel(K_pool, V_pool, loc, K, V, stride_kt, stride_kh, stride_kd, stride_vt, stride_vh, stride_vd,
                     HEAD_DIM: tl.constexpr, ROW: tl.constexpr, BLOCK: tl.constexpr):
    token = tl.program_id(0)
    slot = tl.load(loc + token).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < ROW
    head = offs // HEAD_DIM
    dim = offs % HEAD_DIM
    k = tl.load(K + token * stride_kt + head * stride_kh + dim * stride_kd, mask=mask)
    v = tl.load(V + token * stride_vt + head * stride_vh + dim * stride_vd, mask=mask)
    tl.store(K_pool + slot * ROW + offs, k.to(K_pool.dtype.element_ty), mask=mask)
    tl.store(V_pool + slot * ROW + offs, v.to(V_pool.dtype.element_ty), mask=mask)


def store_kv(k_pool: torch.Tensor, v_pool: torch.Tensor, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Write ``k``, ``v`` ``[num_tokens, num_kv_heads, head_dim]`` into pool rows ``loc`` ``[num_tokens]``."""
    check_store_kv(k_pool, v_pool, loc, k, v)
    check_device("k_pool", k_pool)
    for name, pool in (("k_pool", k_pool), ("v_pool", v_pool)):
        if not pool.is_contiguous():
            raise ValueError(f"{name} must be contiguous, got strides {pool.stride()}")
    num_tokens = loc.shape[0]
    if num_tokens == 0:
        return
    row = k_pool.shape[1] * k_pool.shape[2]
    _store_kv_kernel[(num_tokens,)](
        k_pool, v_pool, loc, k, v, k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        HEAD_DIM=k_pool.shape[2], ROW=row, BLOCK=triton.next_power_of_2(row),
    )
