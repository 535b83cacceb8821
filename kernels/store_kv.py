"""Triton scatter of the new tokens' K/V into their pool slots.

One program per BLOCK_T new tokens copies their K rows and V rows (``num_kv_heads * head_dim``
values each), casting to the pool's dtype; BLOCK_T is sized so a tile holds about 4096 values. The inputs may be strided views (K and V split out
of a fused QKV projection); the pools must be contiguous rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from radixlm.kernels.contract import check_store_kv
from radixlm.kernels.triton_mode import check_device


@triton.jit
def _store_kv_kernel(K_pool, V_pool, loc, K, V, stride_kt, stride_kh, stride_kd, stride_vt, stride_vh, stride_vd,
                     num_tokens, HEAD_DIM: tl.constexpr, ROW: tl.constexpr, BLOCK_T: tl.constexpr,
                     BLOCK: tl.constexpr):
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    mask_t = tokens < num_tokens
    slots = tl.load(loc + tokens, mask=mask_t, other=0).to(tl.int64)  # [BLOCK_T]
    offs = tl.arange(0, BLOCK)
    mask = mask_t[:, None] & (offs < ROW)[None, :]  # [BLOCK_T, BLOCK]
    head = offs // HEAD_DIM
    dim = offs % HEAD_DIM
    t = tokens.to(tl.int64)[:, None]
    k = tl.load(K + t * stride_kt + (head * stride_kh + dim * stride_kd)[None, :], mask=mask)
    v = tl.load(V + t * stride_vt + (head * stride_vh + dim * stride_vd)[None, :], mask=mask)
    rows = slots[:, None] * ROW + offs[None, :]
    tl.store(K_pool + rows, k.to(K_pool.dtype.element_ty), mask=mask)
    tl.store(V_pool + rows, v.to(V_pool.dtype.element_ty), mask=mask)


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
    block = triton.next_power_of_2(row)
    block_t = min(max(1, 4096 // block), triton.next_power_of_2(num_tokens))
    _store_kv_kernel[(triton.cdiv(num_tokens, block_t),)](
        k_pool, v_pool, loc, k, v, k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2),
        num_tokens, HEAD_DIM=k_pool.shape[2], ROW=row, BLOCK_T=block_t, BLOCK=block,
    )
