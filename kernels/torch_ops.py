"""Fast pure-torch attention over the paged KV pool: the CPU engine's path.

Same contracts and numerics as ``attention_ref`` (all math in float32, result cast to q's dtype; a
16-bit KV pool is widened to float32 as it is gathered and rounded to it on store),
but batched: every request's context is gathered once, head-major, into a padded
``[bs, num_kv_heads, max_kv_len, head_dim]`` tensor with a validity mask, so a decode step is one
fused attention call per layer and an extend step is one ``scaled_dot_product_attention`` call (or
one per request when padding would waste more than it saves). Decode and extend batches whose
requests share a cached prefix (``shared_prefix_len``) attend to it once for the whole batch (cascade
attention: the prefix K/V gathered once, not once per request).
GQA is handled by grouping query heads, never by repeating K/V.

Decode in float32 on the CPU runs ``kernels/cpu_native``'s paged decode attention when it is
available: one call reads each request's K/V rows straight from the pool (no gather copy, no
padding; a shared prefix once for the batch), where the padded path costs a dozen small ops. An
extend batch behind a shared prefix whose own keys are few (requests admitted together behind a
cached system prompt) runs its cascade natively too (``cpu_native.cascade_attention``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from radixlm.kernels import cpu_native
from radixlm.kernels.contract import (
    check_attention,
    check_bitmask,
    check_store_kv,
    check_window,
    trim_to_window,
    window_mask,
)

# torch's fused CPU flash-attention kernel; unlike the public SDPA it also returns the log-sum-exp
_FLASH_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_BYTE_BITS: dict[torch.device, torch.Tensor] = {}  # device -> [256, 8] bool: bit j of byte b is clear


def _padded_rows(starts: torch.Tensor, lens: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row numbers ``starts[i] + j`` for j < width as ``[bs, width]`` int64, and ``j < lens[i]``."""
    pos = torch.arange(width, device=starts.device)
    valid = pos.unsqueeze(0) < lens.unsqueeze(1)  # [bs, width]
    rows = starts.long().unsqueeze(1) + pos.unsqueeze(0)
    return torch.where(valid, rows, 0), valid


def _gather_head_major(pool: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Pool rows ``slots`` ``[..., S]`` as float32 ``[..., num_kv_heads, S, head_dim]``.

    A contiguous pool is read as ``[num_slots * num_kv_heads, head_dim]`` rows in head-major order,
    so one ``index_select`` yields the layout matmul wants (no transpose copy afterwards).
    """
    kv_heads, head_dim = pool.shape[1], pool.shape[2]
    if pool.is_contiguous():
        heads = torch.arange(kv_heads, device=pool.device)
        rows = slots.unsqueeze(-2) * kv_heads + heads.unsqueeze(1)  # [..., kv_heads, S]
        out = pool.view(-1, head_dim).index_select(0, rows.reshape(-1)).view(*rows.shape, head_dim)
    else:
        out = pool.index_select(0, slots.reshape(-1)).view(*slots.shape, kv_heads, head_dim).transpose(-3, -2)
    return out.float()  # no copy when the pool is float32


def _gather_kv(k_pool: torch.Tensor, v_pool: torch.Tensor, starts: torch.Tensor, kv_indices: torch.Tensor,
               kv_lens: torch.Tensor, max_kv: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K, V of slots ``kv_indices[starts[i] : starts[i] + kv_lens[i]]`` as float32
    ``[bs, num_kv_heads, max_kv, head_dim]``, and key validity ``[bs, max_kv]``."""
    rows, valid = _padded_rows(starts, kv_lens, max_kv)
    # Padding positions read row 0 of kv_indices (or slot 0 when there are no keys): masked later.
    slots = kv_indices.long()[rows] if kv_indices.numel() else torch.zeros_like(rows)  # [bs, max_kv]
    return _gather_head_major(k_pool, slots), _gather_head_major(v_pool, slots), valid


def decode_attention_torch(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                           kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float, *,
                           shared_prefix_len: int = 0, sliding_window: int | None = None) -> torch.Tensor:
    """One query per request over its whole context; q ``[bs, num_heads, head_dim]`` -> same shape.

    ``shared_prefix_len`` (P, keyword-only): the caller guarantees that the first P entries of every
    request's ``kv_indices`` range are the same slots (a prefix shared through the radix cache).
    Then the shared K/V are gathered once and all queries of the batch attend to them in one
    call; each request's own suffix is gathered padded as usual, and the two partial results are
    merged by their log-sum-exp (cascade attention). P = 0 (the default) is plain padded attention;
    P must not exceed any request's context length. The Triton backend has no such argument.

    ``sliding_window`` (W, keyword-only; None: the whole context): each query sees only its
    request's last W keys (``kernels/contract``); the shared prefix is then not used.
    """
    sm_scale = check_attention(q, k_pool, v_pool, kv_indptr, kv_indices, sm_scale)
    if check_window(sliding_window) is not None:
        ones = torch.ones(q.shape[0], dtype=torch.int64, device=q.device)
        kv_indptr, kv_indices = trim_to_window(kv_indptr, kv_indices, ones, sliding_window)
        shared_prefix_len = 0
    bs, num_heads, head_dim = q.shape
    if bs == 0:
        return torch.empty_like(q)
    kv_heads = k_pool.shape[1]
    if _native_attention_ok(q, k_pool, v_pool, kv_indptr, kv_indices):
        prefix = _check_shared_prefix(shared_prefix_len, kv_indptr[1:] - kv_indptr[:-1]) if shared_prefix_len else 0
        return cpu_native.decode_attention(q, k_pool, v_pool, kv_indptr, kv_indices, sm_scale, prefix)
    kv_lens = kv_indptr[1:] - kv_indptr[:-1]
    qg = q.float().reshape(bs, kv_heads, num_heads // kv_heads, head_dim)  # [bs, kv_heads, group, D]
    if shared_prefix_len:
        out = _decode_cascade(qg, k_pool, v_pool, kv_indptr, kv_indices, kv_lens,
                              _check_shared_prefix(shared_prefix_len, kv_lens), sm_scale)
    else:
        k, v, valid = _gather_kv(k_pool, v_pool, kv_indptr[:-1], kv_indices, kv_lens, int(kv_lens.max()))
        out, _ = _attention_lse(qg, k, v, sm_scale, _key_bias(valid))  # [bs, kv_heads, group, D]
    return out.reshape(bs, num_heads, head_dim).to(q.dtype)


def _native_attention_ok(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, kv_indptr: torch.Tensor,
                         kv_indices: torch.Tensor) -> bool:
    """The native kernel takes it: float32 CPU, contiguous pools, int64 indices, q heads contiguous."""
    bs, num_heads, head_dim = q.shape
    return (q.dtype == torch.float32 and q.stride(2) == 1 and q.stride(1) == head_dim
            and cpu_native.usable_kv(k_pool, v_pool) and cpu_native.usable_indices(kv_indptr, kv_indices)
            and cpu_native.decode_attention_ok(num_heads, k_pool.shape[1], head_dim))


def _check_shared_prefix(shared_prefix_len: object, kv_lens: torch.Tensor) -> int:
    if isinstance(shared_prefix_len, bool) or not isinstance(shared_prefix_len, int):
        raise TypeError(f"shared_prefix_len must be an int, got {type(shared_prefix_len).__name__}")
    shortest = int(kv_lens.min())
    if not 0 <= shared_prefix_len <= shortest:
        raise ValueError(f"shared_prefix_len must lie in [0, {shortest}] (the shortest context), "
                         f"got {shared_prefix_len}")
    return shared_prefix_len


def _key_bias(valid: torch.Tensor) -> torch.Tensor:
    """Key validity ``[bs, S]`` -> additive float32 bias ``[bs, 1, 1, S]`` (0 or -inf)."""
    bias = torch.zeros(valid.shape, dtype=torch.float32, device=valid.device)
    return bias.masked_fill_(~valid, float("-inf"))[:, None, None, :]


def _attention_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                   bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention with its log-sum-exp: q ``[B, h, Lq, D]``, k/v ``[B, h, Lk, D]`` float32,
    ``bias`` additive, broadcastable to ``[B, h, Lq, Lk]`` -> out ``[B, h, Lq, D]``, lse ``[B, h, Lq]``.

    A row that sees no key gets out 0 and an arbitrary lse: callers mask such rows themselves.
    On CPU this is torch's fused flash-attention kernel (one pass, which also returns the lse).
    """
    if _FLASH_CPU is not None and q.device.type == "cpu":
        return _FLASH_CPU(q, k, v, attn_mask=bias, scale=scale)
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(scale)  # [B, h, Lq, Lk]
    if bias is not None:
        scores.add_(bias)
    m = scores.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, 0.0)
    p = scores.sub_(m).exp_()
    total = p.sum(dim=-1, keepdim=True)
    out = torch.matmul(p, v) / total.clamp_min(torch.finfo(torch.float32).tiny)
    return out, (m + total.log()).squeeze(-1)


def _decode_cascade(qg: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, kv_indptr: torch.Tensor,
                    kv_indices: torch.Tensor, kv_lens: torch.Tensor, prefix: int, sm_scale: float) -> torch.Tensor:
    """Decode attention split at a shared prefix; qg ``[bs, kv_heads, group, D]`` -> same shape.

    out = o1 * exp(lse1 - lse) + o2 * exp(lse2 - lse) with lse = logaddexp(lse1, lse2), where
    (o1, lse1) attend the prefix and (o2, lse2) the request's own suffix.
    """
    bs, kv_heads, group, head_dim = qg.shape
    # (a) every query of the batch against the shared prefix: one attention per KV head
    slots = kv_indices[:prefix].long()
    kp, vp = _gather_head_major(k_pool, slots), _gather_head_major(v_pool, slots)  # [kv_heads, P, D]
    qh = qg.transpose(0, 1).reshape(1, kv_heads, bs * group, head_dim)
    o1, lse1 = _attention_lse(qh, kp.unsqueeze(0), vp.unsqueeze(0), sm_scale)
    o1 = o1.view(kv_heads, bs, group, head_dim).transpose(0, 1)  # [bs, kv_heads, group, D]
    lse1 = lse1.view(kv_heads, bs, group).transpose(0, 1).unsqueeze(-1)  # [bs, kv_heads, group, 1]
    # (b) each request's own suffix, padded
    suffix_lens = kv_lens - prefix
    max_suffix = int(suffix_lens.max())
    if not max_suffix:
        return o1.clone()
    ks, vs, valid = _gather_kv(k_pool, v_pool, kv_indptr[:-1] + prefix, kv_indices, suffix_lens, max_suffix)
    o2, lse2 = _attention_lse(qg, ks, vs, sm_scale, _key_bias(valid))
    lse2 = lse2.unsqueeze(-1).masked_fill_((suffix_lens == 0)[:, None, None, None], float("-inf"))
    lse = torch.logaddexp(lse1, lse2)  # finite: the prefix has P >= 1 keys
    return o1 * (lse1 - lse).exp_() + o2 * (lse2 - lse).exp_()


def _causal_mask(q_lens: torch.Tensor, kv_lens: torch.Tensor, max_q: int, max_kv: int) -> torch.Tensor:
    """``[bs, 1, max_q, max_kv]`` bool, True where query j may see key t: t <= prefix + j, t < kv_len."""
    return window_mask(q_lens, kv_lens, max_q, max_kv, None)


def _extend_padded(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, qo_indptr: torch.Tensor,
                   kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float,
                   q_lens: torch.Tensor, kv_lens: torch.Tensor, max_q: int, max_kv: int,
                   no_prefix: bool = False, window: int | None = None) -> torch.Tensor:
    """Extend for a whole batch (or one request) padded to ``[bs, max_q]`` x ``[bs, max_kv]``.

    ``no_prefix`` (every request's context is its new tokens): the plain causal mask is exact (the
    right padding only ever follows a query), and SDPA's causal mode skips the masked half.
    ``window``: keys more than ``window - 1`` positions behind a query are masked too.
    """
    k, v, _ = _gather_kv(k_pool, v_pool, kv_indptr[:-1], kv_indices, kv_lens, max_kv)
    rows, q_valid = _padded_rows(qo_indptr[:-1], q_lens, max_q)
    qp = q[rows].float().transpose(1, 2)  # [bs, num_heads, max_q, head_dim]
    no_prefix = no_prefix and (window is None or max_q <= window)  # a window shorter than the extend masks
    mask = None if no_prefix else window_mask(q_lens, kv_lens, max_q, max_kv, window)
    out = F.scaled_dot_product_attention(qp, k, v, attn_mask=mask, scale=sm_scale, enable_gqa=True,
                                         is_causal=no_prefix)
    return out.transpose(1, 2)[q_valid]  # [sum(q_lens), num_heads, head_dim], in qo_indptr order


def _extend_cascade(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, qo_indptr: torch.Tensor,
                    kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float, q_lens: torch.Tensor,
                    suffix_lens: torch.Tensor, prefix: int, max_q: int, max_suffix: int,
                    native: bool = False) -> torch.Tensor:
    """Extend split at a shared prefix of ``prefix`` keys -> float32 ``[sum(q_lens), num_heads, head_dim]``.

    (a) every query [T, H, D] as ``[1, kv_heads, T * group, D]`` against the prefix (all of it is
    visible: each query sits past it); (b) each request's queries against its own suffix keys,
    padded to ``[bs, kv_heads, max_q * group, max_suffix]`` with the causal mask; merged by lse.
    ``native``: both in one softmax by ``cpu_native.cascade_attention`` instead, nothing padded.
    """
    if native:
        return _extend_cascade_native(q, k_pool, v_pool, qo_indptr, kv_indptr, kv_indices, sm_scale, q_lens,
                                      suffix_lens, prefix)
    num_tokens, num_heads, head_dim = q.shape
    kv_heads = k_pool.shape[1]
    group = num_heads // kv_heads
    slots = kv_indices[:prefix].long()
    kp, vp = _gather_head_major(k_pool, slots), _gather_head_major(v_pool, slots)  # [kv_heads, P, D]
    qh = q.float().view(num_tokens, kv_heads, group, head_dim).transpose(0, 1)
    o1, lse1 = _attention_lse(qh.reshape(1, kv_heads, num_tokens * group, head_dim), kp.unsqueeze(0),
                              vp.unsqueeze(0), sm_scale)
    o1 = o1.reshape(kv_heads, num_tokens, group, head_dim).transpose(0, 1)  # [T, kv_heads, group, D]
    lse1 = lse1.reshape(kv_heads, num_tokens, group).transpose(0, 1)  # [T, kv_heads, group]
    bs = q_lens.shape[0]
    ks, vs, _ = _gather_kv(k_pool, v_pool, kv_indptr[:-1] + prefix, kv_indices, suffix_lens, max_suffix)
    rows, q_valid = _padded_rows(qo_indptr[:-1], q_lens, max_q)
    qs = q[rows].float().view(bs, max_q, kv_heads, group, head_dim).permute(0, 2, 1, 3, 4)
    mask = _causal_mask(q_lens, suffix_lens, max_q, max_suffix)  # [bs, 1, max_q, max_suffix]
    bias = torch.zeros(mask.shape, dtype=torch.float32, device=q.device).masked_fill_(~mask, float("-inf"))
    bias = bias.unsqueeze(3).expand(bs, 1, max_q, group, max_suffix).reshape(bs, 1, max_q * group, max_suffix)
    o2, lse2 = _attention_lse(qs.reshape(bs, kv_heads, max_q * group, head_dim), ks, vs, sm_scale, bias)
    o2 = o2.reshape(bs, kv_heads, max_q, group, head_dim).permute(0, 2, 1, 3, 4)[q_valid]  # [T, kv_heads, group, D]
    lse2 = lse2.reshape(bs, kv_heads, max_q, group).permute(0, 2, 1, 3)[q_valid]  # finite: a query sees itself
    lse = torch.logaddexp(lse1, lse2)
    out = o1 * (lse1 - lse).exp_().unsqueeze(-1) + o2 * (lse2 - lse).exp_().unsqueeze(-1)
    return out.reshape(num_tokens, num_heads, head_dim)


def _extend_cascade_native(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, qo_indptr: torch.Tensor,
                           kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float, q_lens: torch.Tensor,
                           suffix_lens: torch.Tensor, prefix: int) -> torch.Tensor:
    """``_extend_cascade`` by the native kernel: query t of request b (its j-th new token) sees the
    shared prefix, then its request's keys from the prefix's end up to itself,
    ``kv_indices[kv_indptr[b] + prefix : kv_indptr[b] + prefix + suffix_lens[b] - q_lens[b] + j + 1]``."""
    num_tokens = q.shape[0]
    req = torch.repeat_interleave(torch.arange(q_lens.shape[0]), q_lens)  # [T] request of each query
    j = torch.arange(num_tokens) - qo_indptr[:-1][req]
    starts = kv_indptr[:-1][req] + prefix
    ends = starts + (suffix_lens - q_lens)[req] + j + 1
    return cpu_native.cascade_attention(q, k_pool, v_pool, kv_indices[:prefix], starts, ends, kv_indices, sm_scale)


def extend_attention_torch(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                           qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                           sm_scale: float, *, max_pad_ratio: float = 2.0, shared_prefix_len: int = 0,
                           sliding_window: int | None = None) -> torch.Tensor:
    """Causal attention of ragged queries over pooled contexts; q ``[num_tokens, num_heads, head_dim]``.

    The batch runs as one padded SDPA call unless padding would multiply the score matrix by more
    than ``max_pad_ratio``; then each request runs on its own.

    ``shared_prefix_len`` (P, keyword-only): as in ``decode_attention_torch``, the first P entries
    of every request's ``kv_indices`` range are the same slots, and P must not exceed any request's
    cached prefix (context minus new tokens). Then every query of the batch attends to the shared
    K/V gathered once (one call, no mask), each request's own suffix runs padded and causal, and
    the two are merged by log-sum-exp (cascade attention), instead of gathering the prefix per request.
    When the native kernels take the tensors and the batch's own (query, key) pairs are at most a
    quarter of its prefix pairs, one native call does both halves in one softmax, padding nothing.

    ``sliding_window`` (W, keyword-only; None: no window): query j also hides keys at or before
    ``prefix + j - W``; the keys no query sees are dropped first and the shared prefix is not used.
    """
    sm_scale = check_attention(q, k_pool, v_pool, kv_indptr, kv_indices, sm_scale, qo_indptr=qo_indptr)
    out = torch.empty_like(q)
    q_lens_t = qo_indptr[1:] - qo_indptr[:-1]
    window = check_window(sliding_window)
    if window is not None:
        kv_indptr, kv_indices = trim_to_window(kv_indptr, kv_indices, q_lens_t, window)
        shared_prefix_len = 0
    kv_lens_t = kv_indptr[1:] - kv_indptr[:-1]
    q_lens, kv_lens = q_lens_t.tolist(), kv_lens_t.tolist()
    if sum(q_lens) == 0:
        return out
    if shared_prefix_len:
        prefix = _check_shared_prefix(shared_prefix_len, kv_lens_t - q_lens_t)
        suffix = [kv - prefix for kv in kv_lens]
        padded = len(q_lens) * max(q_lens) * max(suffix)
        own = sum(a * b for a, b in zip(q_lens, suffix))  # (query, own key) pairs, causal half included
        # the native kernel pads nothing, and scores the prefix in register tiles; its own keys run
        # untiled (query by query), so it takes batches whose own keys are a small part of the work
        native = own <= sum(q_lens) * prefix / 4 and _native_attention_ok(q, k_pool, v_pool, kv_indptr, kv_indices)
        if prefix and (native or padded <= max_pad_ratio * own):
            first, last = int(qo_indptr[0]), int(qo_indptr[-1])
            res = _extend_cascade(q[first:last], k_pool, v_pool, qo_indptr - first, kv_indptr, kv_indices,
                                  sm_scale, q_lens_t, kv_lens_t - prefix, prefix, max(q_lens), max(suffix), native)
            out[first:last] = res.to(q.dtype)
            return out
    max_q, max_kv = max(q_lens), max(kv_lens)
    useful = sum(a * b for a, b in zip(q_lens, kv_lens))
    qo = qo_indptr.tolist()
    if len(q_lens) * max_q * max_kv <= max_pad_ratio * useful:
        res = _extend_padded(q, k_pool, v_pool, qo_indptr, kv_indptr, kv_indices, sm_scale,
                             q_lens_t, kv_lens_t, max_q, max_kv, no_prefix=q_lens == kv_lens, window=window)
        out[qo[0]:qo[-1]] = res.to(q.dtype)
        return out
    for i, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens)):
        if q_len == 0:
            continue
        res = _extend_padded(q, k_pool, v_pool, qo_indptr[i:i + 2], kv_indptr[i:i + 2], kv_indices, sm_scale,
                             q_lens_t[i:i + 1], kv_lens_t[i:i + 1], q_len, kv_len, no_prefix=q_len == kv_len,
                             window=window)
        out[qo[i]:qo[i + 1]] = res.to(q.dtype)
    return out


def store_kv_torch(k_pool: torch.Tensor, v_pool: torch.Tensor, loc: torch.Tensor,
                   k: torch.Tensor, v: torch.Tensor) -> None:
    """Scatter ``k``, ``v`` ``[num_tokens, num_kv_heads, head_dim]`` into pool rows ``loc`` (cast to the pool dtype)."""
    check_store_kv(k_pool, v_pool, loc, k, v)
    loc = loc.long()
    k_pool.index_copy_(0, loc, k.to(k_pool.dtype))
    v_pool.index_copy_(0, loc, v.to(v_pool.dtype))


def apply_token_bitmask_torch(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set logits of disallowed tokens to -inf in place; bitmask ``[bs, >= ceil(vocab/32)]`` int32.

    A bitmask on another device (the grammar matchers fill CPU tensors) is moved to the logits'.
    """
    check_bitmask(logits, bitmask)
    bs, vocab = logits.shape
    words = (vocab + 31) // 32
    bitmask = bitmask[:, :words].to(logits.device, non_blocking=True).contiguous()
    table = _BYTE_BITS.get(logits.device)
    if table is None:
        byte = torch.arange(256, device=logits.device).unsqueeze(1)
        table = _BYTE_BITS[logits.device] = ((byte >> torch.arange(8, device=logits.device)) & 1) == 0
    # Little-endian: byte j of word w holds tokens 32w + 8j .. 32w + 8j + 7, low bit first.
    blocked = table.index_select(0, bitmask.view(torch.uint8).view(-1).long())  # [bs * words * 4, 8]
    logits.masked_fill_(blocked.view(bs, words * 32)[:, :vocab], float("-inf"))  # True = disallowed
