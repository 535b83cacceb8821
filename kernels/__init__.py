"""radixlm.kernels: attention over the paged KV pool, KV store and grammar bitmask.

``get_ops(backend)`` returns the four operations for ``"torch"`` (fast pure torch, any device; the
CPU engine's path) or ``"triton"`` (CUDA, or the CPU under ``TRITON_INTERPRET=1``). Triton is
imported lazily so the CPU path never needs it. The ``*_ref`` functions are the slow, obviously
correct references every implementation is tested against.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from radixlm.kernels.attention_ref import (
    apply_token_bitmask_ref,
    decode_attention_ref,
    extend_attention_ref,
    store_kv_ref,
)
from radixlm.kernels.triton_mode import interpreter_enabled

__all__ = [
    "get_ops",
    "select_backend",
    "extend_attention_ref",
    "decode_attention_ref",
    "store_kv_ref",
    "apply_token_bitmask_ref",
]

BACKENDS = ("torch", "triton")


def get_ops(backend: str = "torch") -> SimpleNamespace:
    """Operations ``extend_attention``, ``decode_attention``, ``store_kv``, ``apply_token_bitmask``.

    Signatures (all backends): ``extend_attention(q, k_pool, v_pool, qo_indptr, kv_indptr,
    kv_indices, sm_scale)``, ``decode_attention(q, k_pool, v_pool, kv_indptr, kv_indices,
    sm_scale)``, ``store_kv(k_pool, v_pool, loc, k, v)``, ``apply_token_bitmask(logits, bitmask)``;
    semantics as in ``attention_ref``. ``"triton"`` raises ImportError when triton is missing.
    """
    if backend == "torch":
        from radixlm.kernels import torch_ops

        return SimpleNamespace(
            extend_attention=torch_ops.extend_attention_torch,
            decode_attention=torch_ops.decode_attention_torch,
            store_kv=torch_ops.store_kv_torch,
            apply_token_bitmask=torch_ops.apply_token_bitmask_torch,
        )
    if backend == "triton":
        from radixlm.kernels.decode_attention import decode_attention
        from radixlm.kernels.extend_attention import extend_attention
        from radixlm.kernels.store_kv import store_kv
        from radixlm.kernels.token_bitmask import apply_token_bitmask

        return SimpleNamespace(
            extend_attention=extend_attention,
            decode_attention=decode_attention,
            store_kv=store_kv,
            apply_token_bitmask=apply_token_bitmask,
        )
    raise ValueError(f"unknown attention backend {backend!r}; expected 'torch' or 'triton'")


def select_backend(requested: str, device: str | torch.device) -> str:
    """Resolve ``--attention-backend {auto, torch, triton}`` for a device.

    ``auto`` picks ``triton`` on CUDA when triton is importable, else ``torch``. An explicit
    ``triton`` on a CPU device is allowed only with ``TRITON_INTERPRET=1`` (ValueError otherwise).
    """
    device = torch.device(device)
    if requested not in ("auto", *BACKENDS):
        raise ValueError(f"attention_backend must be one of 'auto', 'torch', 'triton'; got {requested!r}")
    if requested == "auto":
        if device.type != "cuda":
            return "torch"
        try:
            import triton  # noqa: F401
        except ImportError:
            return "torch"
        return "triton"
    if requested == "triton" and device.type != "cuda":
        if not interpreter_enabled():
            raise ValueError(f"attention_backend 'triton' needs a CUDA device (got {device}) "
                             "or TRITON_INTERPRET=1 for the CPU interpreter")
    return requested
