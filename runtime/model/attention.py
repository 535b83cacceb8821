"""Paged attention layer: stores the new tokens' K/V in the pool, then attends over each request's
context through the kernels chosen by name (``radixlm.kernels.get_ops``).

``resolve_attention_backend("auto", device)`` is ``"triton"`` on CUDA and ``"torch"`` elsewhere
(the rules live in ``radixlm.kernels.select_backend``); extend/prefill batches use
``extend_attention`` and decode batches ``decode_attention`` (with the torch backend, both given the
batch's ``shared_prefix_len``: cascade attention over a radix-cache prefix every request shares).
A layer with a ``sliding_window`` (Gemma 3's local layers) passes it to every kernel, which hides
the keys older than the window; the pool still holds them (they are shared prefixes of the radix
cache), and such a layer takes no cascade.
"""

from __future__ import annotations

import torch
from radixlm.kernels import get_ops, select_backend
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool


def resolve_attention_backend(name: str, device: torch.device | str) -> str:
    """``"auto"`` -> ``"triton"`` on CUDA (when triton imports), ``"torch"`` otherwise.

    ``"torch"`` passes through; ``"triton"`` on a CPU device needs ``TRITON_INTERPRET=1``.
    Anything else raises ``ValueError`` naming ``attention_backend``.
    """
    return select_backend(name, device)


class PagedAttention:
    """Attention of one layer over the paged KV pool (no parameters)."""

    def __init__(self, layer_id: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 backend: str = "torch", *, sm_scale: float | None = None,
                 sliding_window: int | None = None) -> None:
        self.layer_id = layer_id
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.sm_scale = head_dim**-0.5 if sm_scale is None else sm_scale
        self.sliding_window = sliding_window
        self.ops = get_ops(backend)
        # the Triton extend kernel sizes its grid from the longest extend; the host knows it
        self._pass_max_q_len = backend == "triton"
        # the torch decode and extend paths split attention at a prefix shared by the whole batch (cascade)
        self._cascade = backend == "torch"
        # the layer may store K/V itself (kernels/cpu_native's fused RoPE + store), then call attend()
        self.native_ok = backend == "torch"

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: ForwardBatch,
                 kv_pool: KVPool) -> torch.Tensor:
        """q ``[num_tokens, num_heads, head_dim]``, k/v ``[num_tokens, num_kv_heads, head_dim]``
        -> ``[num_tokens, num_heads, head_dim]``."""
        k_pool = kv_pool.k_buffers[self.layer_id]  # [num_slots, num_kv_heads, head_dim]
        v_pool = kv_pool.v_buffers[self.layer_id]
        self.ops.store_kv(k_pool, v_pool, batch.out_cache_loc, k, v)
        return self.attend(q, batch, kv_pool)

    def attend(self, q: torch.Tensor, batch: ForwardBatch, kv_pool: KVPool) -> torch.Tensor:
        """Attention of q ``[num_tokens, num_heads, head_dim]`` over contexts whose K/V (the new
        tokens' included) are already in the pool -> ``[num_tokens, num_heads, head_dim]``."""
        k_pool = kv_pool.k_buffers[self.layer_id]
        v_pool = kv_pool.v_buffers[self.layer_id]
        if self.sliding_window is not None:
            return self._attend_window(q, batch, k_pool, v_pool)
        if batch.is_decode:
            if batch.shared_prefix_len and self._cascade:
                return self.ops.decode_attention(q, k_pool, v_pool, batch.kv_indptr, batch.kv_indices,
                                                 self.sm_scale, shared_prefix_len=batch.shared_prefix_len)
            return self.ops.decode_attention(q, k_pool, v_pool, batch.kv_indptr, batch.kv_indices,
                                             self.sm_scale)
        kwargs = {"max_q_len": batch.max_extend_len} if self._pass_max_q_len else {}
        if batch.shared_prefix_len and self._cascade:
            kwargs["shared_prefix_len"] = batch.shared_prefix_len
        return self.ops.extend_attention(q, k_pool, v_pool, batch.qo_indptr, batch.kv_indptr,
                                         batch.kv_indices, self.sm_scale, **kwargs)

    def _attend_window(self, q: torch.Tensor, batch: ForwardBatch, k_pool: torch.Tensor,
                       v_pool: torch.Tensor) -> torch.Tensor:
        """``attend`` for a sliding-window layer: each query sees its last ``sliding_window`` keys."""
        window = self.sliding_window
        if batch.is_decode:
            return self.ops.decode_attention(q, k_pool, v_pool, batch.kv_indptr, batch.kv_indices,
                                             self.sm_scale, sliding_window=window)
        kwargs = {"max_q_len": batch.max_extend_len} if self._pass_max_q_len else {}
        return self.ops.extend_attention(q, k_pool, v_pool, batch.qo_indptr, batch.kv_indptr,
                                         batch.kv_indices, self.sm_scale, sliding_window=window, **kwargs)
