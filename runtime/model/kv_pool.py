"""The paged KV pool and the req_to_token table (the tensors behind the slot allocators).

Memory picture for one request in row ``r`` of the table::

    req_to_token[r]:  | s0 s1 ... s(p-1) | n0 ... n(e-1) | (unused) ...
                        cached prefix p    new tokens e
    k_buffers[layer][s] = key of the token whose KV slot is s   ([num_kv_heads, head_dim])

Slot 0 of the pool is padding (``SlotAllocator`` never hands it out), so unused table entries,
which are 0, always point at a harmless row.

The pool's dtype is the KV cache's (``--kv-cache-dtype``, ``kv_cache_dtype``): the compute dtype, or a
16-bit one under float32 compute, where the kernels round K/V to it on store and widen it on load (the
arithmetic stays in the compute dtype); a 16-bit pool holds twice the tokens of a float32 one in the
same bytes (``bytes_per_slot``).

On the CPU the large buffers are anonymous mappings (``lazy_zeros``): zero-filled like
``torch.zeros`` but resident only once written, so a pool sized for the whole context and a table of
``max_running_requests x context_len`` rows cost memory as requests fill them, not at start-up.
"""

from __future__ import annotations

import mmap

import torch

LAZY_MIN_BYTES = 1 << 21  # below one huge page, torch.zeros is as cheap
KV_CACHE_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def kv_cache_dtype(name: str, compute_dtype: torch.dtype, half_ok: bool) -> torch.dtype:
    """The KV pool's dtype for ``ServerArgs.kv_cache_dtype`` ``name`` (already in our spelling): a named
    dtype as named; ``auto``: a 16-bit compute dtype itself, else float16 where the active kernels read a
    float16 pool (``half_ok``: the native CPU kernels, Triton), else the compute dtype.

    float16 rather than bfloat16: three more mantissa bits (K/V rounded to 2^-11 relative, not 2^-8),
    and x86's F16C converts 8 lanes per instruction; its range (65504) holds post-norm K/V."""
    if name != "auto":
        if name not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be auto or one of {', '.join(KV_CACHE_DTYPES)}; got {name!r}")
        return KV_CACHE_DTYPES[name]
    if compute_dtype in (torch.float16, torch.bfloat16) or not half_ok:
        return compute_dtype
    return torch.float16


def lazy_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """``torch.zeros(shape)``; on the CPU a large one is a fresh anonymous mapping (resident when written)."""
    numel = 1
    for n in shape:
        numel *= n
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if torch.device(device).type != "cpu" or nbytes < LAZY_MIN_BYTES:
        return torch.zeros(shape, dtype=dtype, device=device)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # zero pages until written
    return torch.frombuffer(region, dtype=dtype, count=numel).view(shape)  # keeps the mapping alive


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
        self.k_buffers = [lazy_zeros(shape, dtype, device) for _ in range(num_layers)]
        self.v_buffers = [lazy_zeros(shape, dtype, device) for _ in range(num_layers)]

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
        self.table = lazy_zeros((max_reqs, max_context_len), torch.int64, device)

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
