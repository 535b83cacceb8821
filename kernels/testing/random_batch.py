"""Random paged-KV batches for kernel tests and benchmarks.

Builds a KV pool filled with random keys/values and a ragged batch whose requests' contexts live in
scattered (shuffled) pool slots, exactly as the engine lays them out: slot 0 is left unused as
padding, and each request's ``prefix_len + extend_len`` slots are listed in position order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PagedBatch:
    """Inputs of ``extend_attention`` (and ``decode_attention`` when every extend length is 1)."""

    q: torch.Tensor  # [num_tokens, num_heads, head_dim]
    k_pool: torch.Tensor  # [num_slots, num_kv_heads, head_dim]
    v_pool: torch.Tensor
    qo_indptr: torch.Tensor  # [bs + 1] int32
    kv_indptr: torch.Tensor  # [bs + 1] int32
    kv_indices: torch.Tensor  # [total_kv] int32
    sm_scale: float

    def extend_args(self) -> tuple:
        return (self.q, self.k_pool, self.v_pool, self.qo_indptr, self.kv_indptr, self.kv_indices, self.sm_scale)

    def decode_args(self) -> tuple:
        return (self.q, self.k_pool, self.v_pool, self.kv_indptr, self.kv_indices, self.sm_scale)


def _indptr(lens: list[int], device: torch.device) -> torch.Tensor:
    out = torch.zeros(len(lens) + 1, dtype=torch.int32)
    out[1:] = torch.tensor(lens, dtype=torch.int64).cumsum(0)
    return out.to(device)


def random_paged_batch(prefix_lens: list[int], extend_lens: list[int], num_heads: int, num_kv_heads: int,
                       head_dim: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                       seed: int = 0, spare_slots: int = 16) -> PagedBatch:
    """A batch of ``len(prefix_lens)`` requests over a pool of ``total_kv + spare_slots + 1`` slots."""
    if len(prefix_lens) != len(extend_lens):
        raise ValueError(f"prefix_lens has {len(prefix_lens)} entries but extend_lens has {len(extend_lens)}")
    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    kv_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
    num_slots = sum(kv_lens) + spare_slots + 1
    pool_shape = (num_slots, num_kv_heads, head_dim)
    k_pool = torch.randn(pool_shape, generator=gen).to(device=device, dtype=dtype)
    v_pool = torch.randn(pool_shape, generator=gen).to(device=device, dtype=dtype)
    slots = torch.randperm(num_slots - 1, generator=gen)[: sum(kv_lens)] + 1  # never slot 0
    q = torch.randn((sum(extend_lens), num_heads, head_dim), generator=gen).to(device=device, dtype=dtype)
    return PagedBatch(
        q=q, k_pool=k_pool, v_pool=v_pool,
        qo_indptr=_indptr(extend_lens, device), kv_indptr=_indptr(kv_lens, device),
        kv_indices=slots.to(device=device, dtype=torch.int32), sm_scale=head_dim ** -0.5,
    )
