"""The contract every attention / KV / bitmask implementation shares: its argument checks, and
which keys a sliding-window query sees.

Argument checks: only metadata is inspected (shape, dtype, stride, device), never tensor values, so a check costs
a few microseconds and never synchronises with the GPU. Bad input raises ``TypeError`` (wrong
type or dtype) or ``ValueError`` (wrong shape, stride or device) naming the argument.

Sliding-window attention over the paged KV pool: the pool keeps every position's K/V (the radix cache shares whole prefixes, so nothing is evicted
per layer); a sliding-window layer only hides old keys. Query j of a request with ``kv_len`` keys
and ``q_len`` new tokens sits at position ``kv_len - q_len + j`` and sees keys ``pos - W + 1 ..
pos`` (transformers' ``kv_idx > q_idx - W``). Keys before ``kv_len - q_len - W + 1`` are seen by
no query of the request, so ``trim_to_window`` drops them from the index lists once; what is left
is exactly a decode's context, and an extend's keys that a window mask (``window_mask``) then
narrows per query.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)


def _tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _dtype(name: str, x: torch.Tensor, allowed: tuple[torch.dtype, ...]) -> None:
    if x.dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise TypeError(f"{name} must have dtype in ({names}), got {str(x.dtype).removeprefix('torch.')}")


def _ndim(name: str, x: torch.Tensor, ndim: int, layout: str) -> None:
    if x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D {layout}, got shape {tuple(x.shape)}")


def _unit_last_stride(name: str, x: torch.Tensor) -> None:
    if x.shape[-1] > 1 and x.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dim, got strides {x.stride()}")


def _same_device(ref: str, device: torch.device, **tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but {ref} is on {device}; all inputs must share a device")


def check_sm_scale(sm_scale: object) -> float:
    """``sm_scale`` must be a real, positive number; returns it as a float."""
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)):
        raise TypeError(f"sm_scale must be a float, got {type(sm_scale).__name__}")
    if not sm_scale > 0:
        raise ValueError(f"sm_scale must be positive, got {sm_scale}")
    return float(sm_scale)


def check_pools(k_pool: object, v_pool: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Both pools ``[num_slots, num_kv_heads, head_dim]``, same shape, dtype and device."""
    k_pool, v_pool = _tensor("k_pool", k_pool), _tensor("v_pool", v_pool)
    for name, pool in (("k_pool", k_pool), ("v_pool", v_pool)):
        _ndim(name, pool, 3, "[num_slots, num_kv_heads, head_dim]")
        _dtype(name, pool, FLOAT_DTYPES)
        _unit_last_stride(name, pool)
    if k_pool.shape != v_pool.shape:
        raise ValueError(f"v_pool shape {tuple(v_pool.shape)} differs from k_pool shape {tuple(k_pool.shape)}")
    if k_pool.dtype != v_pool.dtype:
        raise TypeError(f"v_pool dtype {v_pool.dtype} differs from k_pool dtype {k_pool.dtype}")
    if k_pool.device != v_pool.device:
        raise ValueError(f"v_pool is on {v_pool.device} but k_pool is on {k_pool.device}")
    return k_pool, v_pool


def check_attention(q: object, k_pool: object, v_pool: object, kv_indptr: object, kv_indices: object,
                    sm_scale: object, qo_indptr: object | None = None) -> float:
    """Check an extend (``qo_indptr`` given) or decode (``qo_indptr is None``) call; returns sm_scale.

    q: [num_tokens, num_heads, head_dim] (decode: [bs, num_heads, head_dim]); num_heads must be a
    multiple of the pools' num_kv_heads; indptrs [bs + 1] and kv_indices [total_kv] integer. The pools
    may hold another float dtype than q (a 16-bit KV cache under float32 compute): kernels widen on load.
    """
    q = _tensor("q", q)
    k_pool, v_pool = check_pools(k_pool, v_pool)
    layout = "[bs, num_heads, head_dim]" if qo_indptr is None else "[num_tokens, num_heads, head_dim]"
    _ndim("q", q, 3, layout)
    _dtype("q", q, FLOAT_DTYPES)
    _unit_last_stride("q", q)
    if q.shape[2] != k_pool.shape[2]:
        raise ValueError(f"q head_dim {q.shape[2]} differs from k_pool head_dim {k_pool.shape[2]}")
    if q.shape[1] % k_pool.shape[1] != 0:
        raise ValueError(f"q num_heads {q.shape[1]} is not a multiple of k_pool num_kv_heads {k_pool.shape[1]}")
    indices = {"kv_indptr": kv_indptr, "kv_indices": kv_indices}
    if qo_indptr is not None:
        indices["qo_indptr"] = qo_indptr
    for name, t in indices.items():
        t = _tensor(name, t)
        _ndim(name, t, 1, "integer tensor")
        _dtype(name, t, INDEX_DTYPES)
    if kv_indptr.shape[0] < 1:
        raise ValueError("kv_indptr must have bs + 1 >= 1 entries, got 0")
    if qo_indptr is None and kv_indptr.shape[0] != q.shape[0] + 1:
        raise ValueError(f"kv_indptr must have bs + 1 = {q.shape[0] + 1} entries, got {kv_indptr.shape[0]}")
    if qo_indptr is not None and qo_indptr.shape != kv_indptr.shape:
        raise ValueError(f"qo_indptr has {qo_indptr.shape[0]} entries but kv_indptr has {kv_indptr.shape[0]}")
    _same_device("q", q.device, k_pool=k_pool, v_pool=v_pool, **indices)
    return check_sm_scale(sm_scale)


def check_store_kv(k_pool: object, v_pool: object, loc: object, k: object, v: object) -> None:
    """loc: [num_tokens] integer; k, v: [num_tokens, num_kv_heads, head_dim] matching the pools."""
    k_pool, v_pool = check_pools(k_pool, v_pool)
    loc = _tensor("loc", loc)
    _ndim("loc", loc, 1, "integer tensor [num_tokens]")
    _dtype("loc", loc, INDEX_DTYPES)
    for name, x in (("k", k), ("v", v)):
        x = _tensor(name, x)
        _ndim(name, x, 3, "[num_tokens, num_kv_heads, head_dim]")
        _dtype(name, x, FLOAT_DTYPES)
        if x.shape[1:] != k_pool.shape[1:]:
            raise ValueError(f"{name} rows {tuple(x.shape[1:])} differ from pool rows {tuple(k_pool.shape[1:])}")
        if x.shape[0] != loc.shape[0]:
            raise ValueError(f"{name} has {x.shape[0]} tokens but loc has {loc.shape[0]}")
    _same_device("k_pool", k_pool.device, loc=loc, k=k, v=v)


def check_bitmask(logits: object, bitmask: object) -> None:
    """logits: [bs, vocab] float; bitmask: [bs, >= ceil(vocab / 32)] int32."""
    logits, bitmask = _tensor("logits", logits), _tensor("bitmask", bitmask)
    _ndim("logits", logits, 2, "[bs, vocab]")
    _dtype("logits", logits, FLOAT_DTYPES)
    _ndim("bitmask", bitmask, 2, "[bs, ceil(vocab / 32)]")
    _dtype("bitmask", bitmask, (torch.int32,))
    words = (logits.shape[1] + 31) // 32
    if bitmask.shape[0] != logits.shape[0]:
        raise ValueError(f"bitmask has {bitmask.shape[0]} rows but logits has {logits.shape[0]}")
    if bitmask.shape[1] < words:
        raise ValueError(f"bitmask has {bitmask.shape[1]} words per row; vocab {logits.shape[1]} needs {words}")


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
