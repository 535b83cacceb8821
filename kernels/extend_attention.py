"""Triton extend (prefill) attention over the paged KV pool.

One program per (request, KV head, block of BLOCK_T new tokens); its tile holds the queries of
those tokens for every head of the KV head's GQA group, so each K/V tile read serves them all. Keys and values — the cached
prefix and the new tokens alike, already stored in the pool — are read by slot index through
``kv_indices``; nothing is copied. Online softmax (flash-attention) in float32; the loop stops at
the last key the block's final query can see, so the causal triangle costs nothing past it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from radixlm.kernels.contract import check_attention, check_window
from radixlm.kernels.online_softmax import online_softmax_block
from radixlm.kernels.triton_mode import check_device, dot_in_f32

MAX_HEAD_DIM = 256


@triton.jit
def _extend_kernel(Q, K, V, Out, qo_indptr, kv_indptr, kv_indices, sm_scale, window,
                   stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
                   GROUP: tl.constexpr, GROUP_P: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
                   DOT_F32: tl.constexpr):
    req = tl.program_id(0)
    kv_head = tl.program_id(1)
    t_block = tl.program_id(2)
    q_start = tl.load(qo_indptr + req).to(tl.int64)
    q_len = (tl.load(qo_indptr + req + 1) - q_start).to(tl.int32)
    if t_block * BLOCK_T < q_len:
        kv_start = tl.load(kv_indptr + req).to(tl.int64)
        kv_len = (tl.load(kv_indptr + req + 1) - kv_start).to(tl.int32)
        prefix = kv_len - q_len

        # Row r of the tile is (token t_block * BLOCK_T + r // GROUP_P, head kv_head * GROUP + r % GROUP_P):
        # every query head of the GQA group shares the K/V tiles loaded below.
        offs_r = tl.arange(0, BLOCK_T * GROUP_P)
        token = t_block * BLOCK_T + offs_r // GROUP_P
        head = kv_head * GROUP + offs_r % GROUP_P
        mask_r = (token < q_len) & (offs_r % GROUP_P < GROUP)
        offs_d = tl.arange(0, BLOCK_D)
        mask_d = offs_d < HEAD_DIM
        row_mask = mask_r[:, None] & mask_d[None, :]
        q_ptrs = Q + (q_start + token)[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :]
        q = tl.load(q_ptrs, mask=row_mask, other=0.0)  # [BLOCK_T * GROUP_P, BLOCK_D]
        if DOT_F32:
            q = q.to(tl.float32)

        m_i = tl.full([BLOCK_T * GROUP_P], float("-inf"), dtype=tl.float32)
        l_i = tl.full([BLOCK_T * GROUP_P], 0.0, dtype=tl.float32)
        acc = tl.full([BLOCK_T * GROUP_P, BLOCK_D], 0.0, dtype=tl.float32)
        # Keys past the block's last query position are invisible to every row of the block.
        kv_end = tl.minimum(kv_len, prefix + (t_block + 1) * BLOCK_T)
        # A sliding window (window > 0): keys before the block's first query's window are invisible too.
        kv_begin = 0
        if window > 0:
            kv_begin = tl.maximum(prefix + t_block * BLOCK_T - window + 1, 0)
        for n0 in range(kv_begin, kv_end, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            mask_n = offs_n < kv_end
            visible = (offs_n[None, :] <= (prefix + token)[:, None]) & mask_n[None, :]  # causal
            if window > 0:
                visible = visible & (offs_n[None, :] > (prefix + token)[:, None] - window)
            m_i, l_i, acc = online_softmax_block(q, m_i, l_i, acc, K, V, kv_head, kv_indices + kv_start,
                                                 offs_n, mask_n, visible, offs_d, mask_d, stride_kt, stride_kh,
                                                 stride_vt, stride_vh, sm_scale, PRECISION, DOT_F32)

        out = acc / l_i[:, None]
        o_ptrs = Out + (q_start + token)[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_mask)


def _blocks(head_dim: int, dtype: torch.dtype, group: int) -> tuple[int, int, int]:
    """(GROUP_P, BLOCK_T, BLOCK_N): tiles of about 64 query rows (32 for float32 or head_dim > 128,
    to fit registers / shared memory), each BLOCK_T tokens x GROUP_P heads."""
    rows = 32 if head_dim > 128 or dtype == torch.float32 else 64
    group_p = triton.next_power_of_2(group)
    block_t = max(1, rows // group_p)
    return group_p, block_t, rows


def extend_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                     qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                     sm_scale: float, *, max_q_len: int | None = None,
                     sliding_window: int | None = None) -> torch.Tensor:
    """Causal attention of ragged new tokens over their pooled contexts (see ``attention_ref``),
    each query seeing only its last ``sliding_window`` keys when one is given.

    q: [num_tokens, num_heads, head_dim]; k_pool, v_pool: [num_slots, num_kv_heads, head_dim] with
    the new tokens already stored; returns [num_tokens, num_heads, head_dim] in q's dtype.
    ``max_q_len`` (the longest extend) sizes the grid; when omitted it is read from ``qo_indptr``
    (one device sync).
    """
    sm_scale = check_attention(q, k_pool, v_pool, kv_indptr, kv_indices, sm_scale, qo_indptr=qo_indptr)
    window = check_window(sliding_window) or 0
    check_device("q", q)
    head_dim = q.shape[2]
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"q head_dim {head_dim} exceeds the triton kernel's maximum {MAX_HEAD_DIM}")
    bs = qo_indptr.shape[0] - 1
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if max_q_len is None:
        max_q_len = int((qo_indptr[1:] - qo_indptr[:-1]).max()) if bs > 0 else 0
    if bs == 0 or max_q_len <= 0 or q.shape[0] == 0:
        return out
    group = q.shape[1] // k_pool.shape[1]
    group_p, block_t, block_n = _blocks(head_dim, q.dtype, group)
    grid = (bs, k_pool.shape[1], triton.cdiv(max_q_len, block_t))
    _extend_kernel[grid](
        q, k_pool, v_pool, out, qo_indptr, kv_indptr, kv_indices, sm_scale, window,
        q.stride(0), q.stride(1), k_pool.stride(0), k_pool.stride(1), v_pool.stride(0), v_pool.stride(1),
        out.stride(0), out.stride(1),
        GROUP=group, GROUP_P=group_p, HEAD_DIM=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_T=block_t, BLOCK_N=block_n, PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        DOT_F32=dot_in_f32(q.dtype), num_warps=4, num_stages=1 if block_n == 32 else 2,
    )
    return out
