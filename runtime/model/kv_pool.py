"""The paged KV pool and the req_to_token table (the tensors behind the slot allocators).

Memory picture for one request in row ``r`` of the table::

    req_to_token[r]:  | s0 s1 ... s(p-1) | n0 ... n(e-1) | (unused) ...
                        cached prefix p    new tokens e
    k_buffers[layer][s] = key of the token whose KV slot is s   ([num_kv_heads, head_dim])

Slot 0 of the pool is padding (``SlotAllocator`` never hands it out), so unused table entries,
which are 0, always point at a harmless row.
"""

from __future__ import annotations

import torch


class KVPool:
    """Per-layer key/value buffers, each ``[num_slots, num_kv_heads, head_dim]``."""

    def __init__(self, num_slots: int, num_layers: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        if num_slots < 2:
            raise ValueError(f"num_slots must be >= 2 (slot 0 is reserved), got {num_slots}")
        self.num_slots = num_slots
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (num_slots, num_kv_heads, head_dim)
        self.k_buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_buffers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    @staticmethod
    def bytes_per_slot(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        """Bytes one token's K and V take over all layers (to size the pool from free memory)."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * num_layers * num_kv_heads * head_dim * itemsize

    def size_bytes(self) -> int:
        """Bytes held by all K and V buffers."""
        return self.num_slots * self.bytes_per_slot(self.num_layers, self.num_kv_heads, self.head_dim,
                                                    self.dtype)


class ReqToTokenTable:
    """int64 ``[max_reqs, max_context_len]``: (request row, position) -> KV slot."""

    def __init__(self, max_reqs: int, max_context_len: int, device: torch.device | str) -> None:
        if max_reqs < 1 or max_context_len < 1:
            raise ValueError(f"max_reqs and max_context_len must be >= 1, got {max_reqs}, {max_context_len}")
        self.max_reqs = max_reqs
        self.max_context_len = max_context_len
        self.device = torch.device(device)
        self.table = torch.zeros((max_reqs, max_context_len), dtype=torch.int64, device=device)

    def write(self, req_pool_index: int, start: int, slots: list[int]) -> None:
        """Set ``table[req_pool_index, start:start + len(slots)] = slots``."""
        if not 0 <= req_pool_index < self.max_reqs:
            raise ValueError(f"req_pool_index {req_pool_index} out of range [0, {self.max_reqs})")
        if start < 0 or start + len(slots) > self.max_context_len:
            raise ValueError(f"table write [{start}, {start + len(slots)}) exceeds max_context_len "
                             f"{self.max_context_len}")
        if slots:
            self.table[req_pool_index, start:start + len(slots)] = torch.tensor(
                slots, dtype=torch.int64).to(self.device, non_blocking=True)

    def read(self, req_pool_index: int, length: int) -> list[int]:
        """The first ``length`` slots of a row (for tests and debugging; copies to the host)."""
        return self.table[req_pool_index, :length].tolist()
