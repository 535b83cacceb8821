"""Sliding-window attention over the paged KV pool: which keys a windowed query still sees.

The pool keeps every position's K/V (the radix cache shares whole prefixes, so nothing is evicted
per layer); a sliding-window layer only hides old keys. Query j of a request with ``kv_len`` keys
and ``q_len`` new tokens sits at position ``kv_len - q_len + j`` and sees keys ``pos - W + 1 ..
pos`` (transformers' ``kv_idx > q_idx - W``). Keys before ``kv_len - q_len - W + 1`` are seen by
no query of the request, so ``trim_to_window`` drops them from the index lists once; what is left
is exactly a decode's context, and an extend's keys that a window mask (``window_mask``) then
narrows per query.
"""

from __future__ import annotations

import torch


def check_window(sliding_window: object) -> int | None:
    """``None`` or a positive int; returns it (``TypeError`` / ``ValueError`` naming the argument)."""
    if sliding_window is None:
        return None
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int):
        raise TypeError(f"sliding_window must be an int or None, got {type(sliding_window).__name__}")
    if sliding_window < 1:
        raise ValueError(f"sliding_window must be >= 1, got {sliding_window}")
    return sliding_window


def trim_to_window(kv_indptr: torch.Tensor, kv_indices: torch.Tensor, q_lens: torch.Tensor,
                   window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each request's context without the keys none of its ``q_lens[i]`` queries can see.

    kv_indptr ``[bs + 1]``, kv_indices ``[total_kv]``, q_lens ``[bs]`` -> (kv_indptr', kv_indices')
    keeping each request's last ``min(kv_len, q_len + window - 1)`` keys, in order (int64).
    """
    kv_lens = kv_indptr[1:] - kv_indptr[:-1]
    keep = torch.minimum(kv_lens, q_lens.to(kv_lens.dtype) + (window - 1))  # [bs]
    new_indptr = torch.zeros_like(kv_indptr, dtype=torch.int64)
    torch.cumsum(keep, 0, out=new_indptr[1:])
    total = int(new_indptr[-1])
    if total == 0:
        return new_indptr, kv_indices[:0].long()
    req = torch.repeat_interleave(torch.arange(keep.shape[0], device=keep.device), keep)  # [total]
    offset = torch.arange(total, device=keep.device) - new_indptr[:-1][req]
    source = kv_indptr[1:].long()[req] - keep.long()[req] + offset  # rows of the old kv_indices
    return new_indptr, kv_indices[source].long()


def window_mask(q_lens: torch.Tensor, kv_lens: torch.Tensor, max_q: int, max_kv: int,
                window: int | None) -> torch.Tensor:
    """``[bs, 1, max_q, max_kv]`` bool, True where query j may see key t: causal (t <= prefix + j,
    t < kv_len) and, with a window, t > prefix + j - window."""
    q_pos = torch.arange(max_q, device=q_lens.device)
    k_pos = torch.arange(max_kv, device=q_lens.device).view(1, 1, -1)
    last_visible = (kv_lens - q_lens).view(-1, 1, 1) + q_pos.view(1, -1, 1)  # [bs, max_q, 1]
    mask = (k_pos <= last_visible) & (k_pos < kv_lens.view(-1, 1, 1))
    if window is not None:
        mask &= k_pos > last_visible - window
    return mask.unsqueeze(1)
