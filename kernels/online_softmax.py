"""The flash-attention inner step shared by the Triton attention kernels: online softmax over one
block of keys read from the paged KV pool.

Each kernel keeps, per query row, the running maximum ``m_i``, the running sum of exponentials
``l_i`` (both relative to ``m_i``) and the unnormalised output ``acc``; a block of keys rescales
them by ``exp(m_old - m_new)`` and adds its own contribution, so the full softmax is never held.
Only the kernels' modules import this one, so triton stays a lazy import of the ``"triton"``
backend.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def online_softmax_block(q, m_i, l_i, acc, K, V, kv_head, Slots, offs_n, mask_n, visible, offs_d, mask_d,
                         stride_kt, stride_kh, stride_vt, stride_vh, sm_scale,
                         PRECISION: tl.constexpr, DOT_F32: tl.constexpr):
    """Fold one block of BLOCK_N pooled keys/values into the online-softmax state of ROWS queries.

    q: [ROWS, BLOCK_D] (already float32 when DOT_F32); m_i, l_i: [ROWS] float32; acc: [ROWS, BLOCK_D]
    float32. K, V: the pools [num_slots, num_kv_heads, head_dim], read at KV head ``kv_head``, in their own
    dtype (a 16-bit KV cache), converted to q's for the dots.
    Slots: the request's ``kv_indices`` row, indexed by the key positions ``offs_n`` [BLOCK_N]
    (``mask_n``: those in range). ``visible`` [ROWS or 1, BLOCK_N]: which keys each row may attend
    to (within ``mask_n``). Returns the updated ``(m_i, l_i, acc)``. Every row must see a key in the
    first block it folds in: a row whose ``m_i`` is still -inf after a block gets NaN from
    ``exp(m_i - m_new)``.
    """
    slots = tl.load(Slots + offs_n, mask=mask_n, other=0).to(tl.int64)  # [BLOCK_N] pool rows
    kv_mask = mask_n[:, None] & mask_d[None, :]
    k = tl.load(K + slots[:, None] * stride_kt + kv_head * stride_kh + offs_d[None, :],
                mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
    if DOT_F32:
        k = k.to(tl.float32)
    else:
        k = k.to(q.dtype)  # a pool of another dtype than q (a 16-bit KV cache under float32 q): widened here
    qk = tl.dot(q, tl.trans(k), input_precision=PRECISION) * sm_scale  # [ROWS, BLOCK_N]
    qk = tl.where(visible, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(qk - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(V + slots[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :],
                mask=kv_mask, other=0.0)
    if DOT_F32:  # probabilities rounded like the values, as on the GPU, then the dot in float32
        p = p.to(V.dtype.element_ty).to(tl.float32)
        v = v.to(tl.float32)
    else:  # the dot in q's dtype: 16-bit q rounds the probabilities as on the GPU; float32 q keeps them
        p = p.to(q.dtype)
        v = v.to(q.dtype)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
    return m_new, l_i, acc
