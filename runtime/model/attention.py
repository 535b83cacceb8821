"""Paged attention layer: stores the new tokens' K/V in the pool, then attends over each request's
context through the kernels chosen by name (``radixlm.kernels.get_ops``).

``resolve_attention_backend("auto", device)`` is ``"triton"`` on CUDA and ``"torch"`` elsewhere
(the rules live in ``radixlm.kernels.select_backend``); extend/prefill batches use
``extend_attention`` and decode batches ``decode_attention`` (with the torch backend, both given the
batch's ``shared_prefix_len``: cascade attention over a radix-cache prefix every request shares).
A layer with a ``sliding_window`` (Gemma 3's local layers) passes it to every kernel, which hides
the keys older than the window; the pool still holds them (they are shared prefixes of the radix
cache), and such a layer takes no cascade.

``RotaryEmbedding`` / ``apply_rotary``: rotary position embedding (RoPE), rotate-half layout, with ``linear`` and ``llama3`` scaling.

Frequencies follow the HF transformers formulas exactly (float32 inverse frequencies, angles
``position * inv_freq`` in float32) so logits match the reference implementation.
"""

from __future__ import annotations

import math
from typing import Any

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


def rope_inv_freq(head_dim: int, rope_theta: float, rope_scaling: dict[str, Any] | None) -> torch.Tensor:
    """Inverse frequencies ``[head_dim // 2]`` float32, after ``rope_scaling`` (None = plain RoPE)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (rope_theta**exponents)
    if rope_scaling is None:
        return inv_freq
    rope_type = rope_scaling.get("rope_type")
    if rope_type == "linear":
        return inv_freq / float(rope_scaling["factor"])
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, rope_scaling)
    if rope_type == "freq_factors":  # llama.cpp's rope_freqs: theta_i = position * inv_freq_i / factor_i
        return inv_freq / torch.tensor(rope_scaling["factors"], dtype=torch.float32)
    raise ValueError(f"rope_scaling type {rope_type!r} is not supported; supported: linear, llama3, freq_factors")


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1 scaling: slow down low frequencies by ``factor``, keep high ones, blend between."""
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling["low_freq_factor"])
    high_freq_factor = float(scaling["high_freq_factor"])
    original_len = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = original_len / low_freq_factor  # wavelengths above this are divided by factor
    high_freq_wavelen = original_len / high_freq_factor  # wavelengths below this are kept
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, blended, scaled)


class RotaryEmbedding:
    """Computes per-token ``cos``/``sin`` once per forward; ``apply_rotary`` uses them in every layer."""

    def __init__(self, head_dim: int, rope_theta: float, rope_scaling: dict[str, Any] | None,
                 device: torch.device | str = "cpu") -> None:
        self.head_dim = head_dim
        self.inv_freq = rope_inv_freq(head_dim, rope_theta, rope_scaling).to(device)  # [head_dim // 2]

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions ``[num_tokens]`` -> (cos, sin), each ``[num_tokens, 1, head_dim]`` in ``dtype``."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [num_tokens, head_dim // 2]
        angles = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # [num_tokens, 1, head_dim]
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[num_tokens, num_heads, head_dim]`` by the angles in ``cos``/``sin``."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
