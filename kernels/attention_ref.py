"""Pure-torch reference attention over the paged KV pool.

The KV pool stores K and V per layer as ``[num_slots, num_kv_heads, head_dim]``. A batch of
requests is described flashinfer-style:

    qo_indptr  [bs + 1]  request i's queries are rows qo_indptr[i]:qo_indptr[i+1] of q
    kv_indptr  [bs + 1]  request i's keys are slots kv_indices[kv_indptr[i]:kv_indptr[i+1]]
    kv_indices [total_kv] KV slots of every request's whole context (cached prefix + new tokens),
                          in position order

The new tokens' K/V are already stored in the pool (``store_kv``) before attention runs, so a
request with ``kv_len`` keys and ``q_len`` queries has ``prefix_len = kv_len - q_len`` cached
tokens, and query j (0-based) attends to keys ``0 .. prefix_len + j`` (causal, aligned to the end).
Decode is the special case ``q_len == 1``. A sliding window ``W`` (Gemma 3's local layers) also
hides keys more than ``W - 1`` positions behind the query: query j sees keys
``max(0, prefix_len + j - W + 1) .. prefix_len + j`` (transformers' ``kv_idx > q_idx - W``).

These functions are the numerical references for the Triton kernels and the CPU attention path.
"""

from __future__ import annotations

import torch


def store_kv_ref(k_pool: torch.Tensor, v_pool: torch.Tensor, loc: torch.Tensor,
                 k: torch.Tensor, v: torch.Tensor) -> None:
    """Scatter new keys/values ``[num_tokens, num_kv_heads, head_dim]`` into pool rows ``loc``."""
    k_pool[loc] = k.to(k_pool.dtype)
    v_pool[loc] = v.to(v_pool.dtype)


def extend_attention_ref(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                         qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                         sm_scale: float, sliding_window: int | None = None) -> torch.Tensor:
    """Causal attention of ragged queries over each request's pooled context.

    q: [num_q_tokens, num_heads, head_dim] -> returns [num_q_tokens, num_heads, head_dim] in q.dtype.
    ``sliding_window`` (None: the whole context): keys at or before ``q_pos - sliding_window`` are hidden.
    """
    num_heads = q.shape[1]
    group = num_heads // k_pool.shape[1]
    out = torch.empty_like(q)
    qo = qo_indptr.tolist()
    kvp = kv_indptr.tolist()
    for i in range(len(qo) - 1):
        q_len, kv_len = qo[i + 1] - qo[i], kvp[i + 1] - kvp[i]
        if q_len == 0:
            continue
        idx = kv_indices[kvp[i]:kvp[i + 1]]
        qi = q[qo[i]:qo[i + 1]].float().transpose(0, 1)  # [H, q_len, D]
        ki = k_pool[idx].float().repeat_interleave(group, dim=1).transpose(0, 1)  # [H, kv_len, D]
        vi = v_pool[idx].float().repeat_interleave(group, dim=1).transpose(0, 1)
        scores = torch.matmul(qi, ki.transpose(1, 2)) * sm_scale  # [H, q_len, kv_len]
        prefix = kv_len - q_len
        q_pos = torch.arange(q_len, device=q.device).unsqueeze(1) + prefix
        k_pos = torch.arange(kv_len, device=q.device).unsqueeze(0)
        hidden = k_pos > q_pos
        if sliding_window is not None:
            hidden |= k_pos <= q_pos - sliding_window
        scores = scores.masked_fill(hidden, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[qo[i]:qo[i + 1]] = torch.matmul(probs, vi).transpose(0, 1).to(q.dtype)
    return out


def decode_attention_ref(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                         kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float,
                         sliding_window: int | None = None) -> torch.Tensor:
    """One query per request over its whole context (or its last ``sliding_window`` keys).
    q: [bs, num_heads, head_dim]."""
    bs = q.shape[0]
    qo_indptr = torch.arange(bs + 1, device=q.device, dtype=kv_indptr.dtype)
    return extend_attention_ref(q, k_pool, v_pool, qo_indptr, kv_indptr, kv_indices, sm_scale, sliding_window)


def apply_token_bitmask_ref(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set disallowed logits to -inf in place.

    logits: [bs, vocab] float; bitmask: [bs, ceil(vocab / 32)] int32, bit (t % 32) of word (t // 32)
    set iff token t is allowed.
    """
    vocab = logits.shape[-1]
    bits = torch.arange(32, device=bitmask.device, dtype=torch.int32)
    allowed = ((bitmask.unsqueeze(-1) >> bits) & 1).bool().flatten(-2)[..., :vocab]
    logits.masked_fill_(~allowed.to(logits.device), float("-inf"))
