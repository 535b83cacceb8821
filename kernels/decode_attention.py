"""Triton decode attention over the paged KV pool: split-KV flash-decoding in two stages.

Stage 1: one program per (request, KV head, split). It loads the query heads of the KV head's
GQA group together (``[BLOCK_H, head_dim]``), so each K/V row read from the pool serves the whole
group, and runs online softmax over its slice of the context, writing a partial output and its
log-sum-exp. Splitting the context keeps the GPU busy when the batch is small but contexts are
long. Stage 2: one program per (request, KV head) merges its group's splits by their
log-sum-exps. With a single split (large batches), stage 1 writes the final output itself and
stage 2 is not launched.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from radixlm.kernels.contract import check_attention, check_window
from radixlm.kernels.online_softmax import online_softmax_block
from radixlm.kernels.triton_mode import check_device, dot_in_f32

MAX_HEAD_DIM = 256
MAX_KV_SPLITS = 64


@triton.jit
def _decode_stage1(Q, K, V, kv_indptr, kv_indices, sm_scale, window, Mid_O, Mid_LSE, Out,
                   stride_qb, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ob, stride_oh,
                   GROUP: tl.constexpr, BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_N: tl.constexpr, SINGLE_SPLIT: tl.constexpr, PRECISION: tl.constexpr,
                   DOT_F32: tl.constexpr):
    req = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    kv_start = tl.load(kv_indptr + req).to(tl.int64)
    kv_len = (tl.load(kv_indptr + req + 1) - kv_start).to(tl.int32)
    if window > 0:  # a sliding window: only the last `window` keys
        kv_start += tl.maximum(kv_len - window, 0).to(tl.int64)
        kv_len = tl.minimum(kv_len, window)
    num_splits = tl.num_programs(2)
    split_len = (kv_len + num_splits - 1) // num_splits
    lo = split * split_len
    hi = tl.minimum(lo + split_len, kv_len)

    offs_g = tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + offs_g
    mask_h = offs_g < GROUP
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    q = tl.load(Q + req * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                mask=mask_h[:, None] & mask_d[None, :], other=0.0)  # [BLOCK_H, BLOCK_D]
    if DOT_F32:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.full([BLOCK_H], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_H, BLOCK_D], 0.0, dtype=tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < hi
        m_i, l_i, acc = online_softmax_block(q, m_i, l_i, acc, K, V, kv_head, kv_indices + kv_start, offs_n,
                                             mask_n, mask_n[None, :], offs_d, mask_d, stride_kt, stride_kh,
                                             stride_vt, stride_vh, sm_scale, PRECISION, DOT_F32)

    has_keys = l_i > 0
    out = acc / tl.where(has_keys, l_i, 1.0)[:, None]  # a request with no keys at all: zeros
    out_mask = mask_h[:, None] & mask_d[None, :]
    if SINGLE_SPLIT:
        tl.store(Out + req * stride_ob + heads[:, None] * stride_oh + offs_d[None, :],
                 out.to(Out.dtype.element_ty), mask=out_mask)
    else:
        # An empty split (short context) gets weight exp(-inf) = 0 in stage 2.
        lse = tl.where(has_keys, m_i + tl.log(tl.where(has_keys, l_i, 1.0)), float("-inf"))
        row = (req * GROUP * tl.num_programs(1) + heads) * num_splits + split  # Mid_LSE[req, head, split]
        tl.store(Mid_LSE + row, lse, mask=mask_h)
        tl.store(Mid_O + row[:, None] * HEAD_DIM + offs_d[None, :], out, mask=out_mask)


@triton.jit
def _decode_stage2(Mid_O, Mid_LSE, Out, stride_ob, stride_oh, num_splits,
                   GROUP: tl.constexpr, BLOCK_G: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_S: tl.constexpr):
    req = tl.program_id(0)
    kv_head = tl.program_id(1)
    offs_g = tl.arange(0, BLOCK_G)
    heads = kv_head * GROUP + offs_g
    mask_h = offs_g < GROUP
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    mask_hs = mask_h[:, None] & (offs_s < num_splits)[None, :]
    row = (req * GROUP * tl.num_programs(1) + heads)[:, None] * num_splits + offs_s[None, :]  # [BLOCK_G, BLOCK_S]
    lse = tl.load(Mid_LSE + row, mask=mask_hs, other=float("-inf"))
    parts = tl.load(Mid_O + row[:, :, None] * HEAD_DIM + offs_d[None, None, :],
                    mask=mask_hs[:, :, None] & (offs_d < HEAD_DIM)[None, None, :], other=0.0)
    m = tl.max(lse, 1)  # [BLOCK_G]
    m = tl.where(m == float("-inf"), 0.0, m)  # a request with no keys at all: output zeros
    w = tl.exp(lse - m[:, None])  # [BLOCK_G, BLOCK_S]
    total = tl.sum(w, 1)
    out = tl.sum(parts * w[:, :, None], 1) / tl.where(total > 0, total, 1.0)[:, None]  # [BLOCK_G, BLOCK_D]
    tl.store(Out + req * stride_ob + heads[:, None] * stride_oh + offs_d[None, :], out.to(Out.dtype.element_ty),
             mask=mask_h[:, None] & (offs_d < HEAD_DIM)[None, :])


def default_num_kv_splits(bs: int, num_kv_heads: int, device: torch.device) -> int:
    """Enough splits for about two waves of programs over the GPU's SMs, between 1 and 16.

    On the CPU (the interpreter runs programs one after another) a single split is fastest.
    """
    if device.type != "cuda":
        return 1
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return max(1, min(16, triton.cdiv(2 * sms, max(1, bs * num_kv_heads))))


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def decode_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                     kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float,
                     *, num_kv_splits: int | None = None, sliding_window: int | None = None) -> torch.Tensor:
    """One query per request over its whole pooled context, or its last ``sliding_window`` keys
    (see ``attention_ref``).

    q: [bs, num_heads, head_dim] -> [bs, num_heads, head_dim] in q's dtype. Each request's context
    is cut into ``num_kv_splits`` equal slices (default: from the batch size and the GPU's SM
    count); the split length is computed on the device, so no host sync is needed.
    """
    sm_scale = check_attention(q, k_pool, v_pool, kv_indptr, kv_indices, sm_scale)
    window = check_window(sliding_window) or 0
    check_device("q", q)
    bs, num_heads, head_dim = q.shape
    kv_heads = k_pool.shape[1]
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"q head_dim {head_dim} exceeds the triton kernel's maximum {MAX_HEAD_DIM}")
    if num_kv_splits is None:
        num_kv_splits = default_num_kv_splits(bs, kv_heads, q.device)
    if not 1 <= num_kv_splits <= MAX_KV_SPLITS:
        raise ValueError(f"num_kv_splits must be in [1, {MAX_KV_SPLITS}], got {num_kv_splits}")
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if bs == 0:
        return out
    group = num_heads // kv_heads
    block_d = max(16, triton.next_power_of_2(head_dim))
    # Partial outputs and log-sum-exps per split; unused (1 element) when there is one split.
    split = num_kv_splits > 1
    mid_o = torch.empty((bs, num_heads, num_kv_splits, head_dim) if split else (1,),
                        dtype=torch.float32, device=q.device)
    mid_lse = torch.empty((bs, num_heads, num_kv_splits) if split else (1,), dtype=torch.float32, device=q.device)
    _decode_stage1[(bs, kv_heads, num_kv_splits)](
        q, k_pool, v_pool, kv_indptr, kv_indices, sm_scale, window, mid_o, mid_lse, out,
        q.stride(0), q.stride(1), k_pool.stride(0), k_pool.stride(1), v_pool.stride(0), v_pool.stride(1),
        out.stride(0), out.stride(1),
        GROUP=group, BLOCK_H=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim, BLOCK_D=block_d,
        BLOCK_N=32 if head_dim > 128 else 64, SINGLE_SPLIT=not split,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", DOT_F32=dot_in_f32(q.dtype),
        num_warps=4, num_stages=1 if head_dim > 128 else 2,
    )
    if split:
        _decode_stage2[(bs, kv_heads)](
            mid_o, mid_lse, out, out.stride(0), out.stride(1), num_kv_splits,
            GROUP=group, BLOCK_G=triton.next_power_of_2(group), HEAD_DIM=head_dim, BLOCK_D=block_d,
            BLOCK_S=triton.next_power_of_2(num_kv_splits),
        )
    return out
