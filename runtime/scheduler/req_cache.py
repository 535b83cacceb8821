"""``ReqCache``: a request's KV memory over the radix cache and the slot allocators (no torch).

The scheduler's only way to take or give back KV slots. It owns the ``RadixCache`` (or none when
``disable_radix_cache``), the ``SlotAllocator`` of KV slots and the ``ReqSlotAllocator`` of
req_to_token rows, and queues the table writes the next ``BatchSpec`` must carry.

Slot ownership (see ``req.py`` for the picture): slots of positions below
``req.kv.cache_protected_len`` belong to the tree and are protected by a lock on
``req.kv.last_node``; slots from there to ``req.kv.kv_len`` belong to the request.
``cache_unfinished`` moves a request's computed prefix into the tree (SGLang's
``cache_unfinished_req``), so chunks of a long prompt and a prompt being decoded are already
shared with the requests behind it; ``release`` does the same for a finished (or retracted)
request and then drops its lock and its remaining slots. Only this class changes ``req.kv``.

The free lists are plain Python too: ``SlotAllocator`` hands out KV slots (slot 0 is reserved as
the padding slot and is never handed out), ``ReqSlotAllocator`` hands out rows of the
``req_to_token`` table, one per running request.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

from radixlm.radix_cache import RadixCache
from radixlm.runtime.scheduler.req import KVState, Req


class ReqCache:
    """KV slots and req_to_token rows for requests, with prefix sharing through a radix tree."""

    def __init__(self, num_slots: int, max_reqs: int, page_size: int = 1,
                 disable_radix_cache: bool = False, eviction_policy: str = "lru") -> None:
        self.num_slots = num_slots
        self.max_reqs = max_reqs
        self.page_size = page_size
        self.slots = SlotAllocator(num_slots)
        self.rows = ReqSlotAllocator(max_reqs)
        self.tree = None if disable_radix_cache else RadixCache(page_size, eviction_policy)
        self.pending_table_writes: list[tuple[int, int, list[int]]] = []
        self.num_evictions = 0  # evict calls so far: a prefix match is stale once this changes

    # ------------------------------------------------------------------ capacity

    @property
    def usable_slots(self) -> int:
        """Slots a request could ever hold (slot 0 is padding)."""
        return self.num_slots - 1

    def available(self) -> int:
        """Slots obtainable right now: free ones plus those the tree could evict."""
        return self.slots.num_free + (self.tree.evictable_size() if self.tree else 0)

    def alloc(self, n: int) -> list[int] | None:
        """``n`` slots, evicting unlocked cached prefixes if short; None if still short."""
        short = n - self.slots.num_free
        if short > 0 and self.tree is not None:
            self.num_evictions += 1
            self.slots.free(self.tree.evict(short))
        return self.slots.alloc(n)

    # ------------------------------------------------------------------ admission

    def match(self, req: Req, max_len: int) -> tuple[list[int], object]:
        """Cached slots of the longest prefix of ``req.fill_ids[:max_len]`` and its node."""
        if self.tree is None or max_len <= 0:
            return [], None
        result = self.tree.match_prefix(req.fill_slice(0, max_len), req.extra_key)
        return result.value, result.last_node

    def admit(self, req: Req, prefix: list[int], node: object) -> bool:
        """Lock the matched prefix and give ``req`` a table row; False if no row is free."""
        rows = self.rows.alloc(1)
        if rows is None:
            return False
        if node is not None:
            self.tree.lock(node)
        kv = req.kv
        kv.req_pool_idx = rows[0]
        kv.last_node = node
        kv.slots = list(prefix)
        kv.kv_len = kv.cache_protected_len = len(prefix)
        if prefix:
            self.pending_table_writes.append((kv.req_pool_idx, 0, list(prefix)))
        return True

    def assign(self, req: Req, slots: list[int]) -> None:
        """This step computes ``len(slots)`` new positions of ``req`` into ``slots``."""
        req.kv.extend_len = len(slots)
        req.kv.slots.extend(slots)

    @staticmethod
    def advance(req: Req) -> None:
        """The step ran: the positions it computed now have KV."""
        req.kv.kv_len += req.kv.extend_len
        req.kv.extend_len = 0

    def rewind(self, req: Req, kv_len: int) -> None:
        """Hand back the slots of positions ``kv_len ..`` (a verify step's rejected drafts, whose
        K/V were computed but are not the request's): ``req.kv.kv_len`` becomes ``kv_len``."""
        kv = req.kv
        if not kv.holds_kv or kv_len >= kv.kv_len:
            return
        if kv_len < kv.cache_protected_len:
            raise ValueError(f"rewind to {kv_len} would free the radix tree's slots "
                             f"(protected up to {kv.cache_protected_len})")
        self.slots.free(kv.slots[kv_len:kv.kv_len])
        del kv.slots[kv_len:]
        kv.kv_len = kv_len

    def pop_table_writes(self) -> list[tuple[int, int, list[int]]]:
        writes, self.pending_table_writes = self.pending_table_writes, []
        return writes

    # ------------------------------------------------------------------ caching and release

    def cache_unfinished(self, req: Req) -> None:
        """Insert ``req``'s computed prefix into the tree and move its lock to the new end.

        Slots the tree already had for some of those positions (another request inserted the
        same tokens meanwhile) replace the request's duplicates, which are freed; the request's
        table row is rewritten for them.
        """
        kv = req.kv
        if self.tree is None:
            return
        n = kv.kv_len - kv.kv_len % self.page_size
        if n <= kv.cache_protected_len:
            return
        key = req.fill_slice(0, n)
        already = self.tree.insert(key, kv.slots[:n], req.extra_key)
        self._free_duplicates(kv, already)
        result = self.tree.match_prefix(key, req.extra_key)
        self.tree.lock(result.last_node)
        self._unlock(kv)
        protected = kv.cache_protected_len
        if result.value[protected:already] != kv.slots[protected:already]:
            self.pending_table_writes.append((kv.req_pool_idx, protected, result.value[protected:already]))
        kv.slots[:n] = result.value
        kv.last_node = result.last_node
        kv.cache_protected_len = n

    def release(self, req: Req, insert: bool = True) -> None:
        """Give back everything ``req`` holds: cache its computed prefix (when ``insert``),
        unlock, free its own slots and its table row. Afterwards ``req`` holds nothing."""
        kv = req.kv
        if kv.req_pool_idx is None:
            return
        own_from = kv.cache_protected_len
        if self.tree is not None and insert:
            n = kv.kv_len - kv.kv_len % self.page_size
            if n > kv.cache_protected_len:
                already = self.tree.insert(req.fill_slice(0, n), kv.slots[:n], req.extra_key)
                self._free_duplicates(kv, already)
                own_from = n  # positions below n are now the tree's
        self._unlock(kv)
        self.slots.free(kv.slots[own_from:kv.kv_len])
        self.rows.free([kv.req_pool_idx])
        kv.reset()

    def flush(self) -> None:
        """Drop every cached prefix (only valid when no request holds a lock)."""
        if self.tree is None:
            return
        if self.tree.protected_size():
            raise RuntimeError("flush: cached prefixes are still locked by running requests")
        self.num_evictions += 1
        self.slots.free(self.tree.evict(self.tree.total_size()))
        self.tree.reset()

    def reset(self) -> None:
        """Forget all accounts (after a failed step: every request was failed and dropped)."""
        self.slots = SlotAllocator(self.num_slots)
        self.rows = ReqSlotAllocator(self.max_reqs)
        self.num_evictions += 1
        if self.tree is not None:
            self.tree.reset()
        self.pending_table_writes = []

    def check_no_leak(self) -> None:
        """``AssertionError`` unless every slot is free or cached in the tree, no row is used."""
        cached = self.tree.total_size() if self.tree else 0
        if self.tree is not None:
            self.tree.check_integrity()
            assert self.tree.protected_size() == 0, f"locked prefixes remain: {self.tree.protected_size()}"
        assert self.slots.num_free + cached == self.usable_slots, (
            f"KV slot leak: free {self.slots.num_free} + cached {cached} != {self.usable_slots}")
        assert self.rows.num_used == 0, f"req_to_token rows leaked: {self.rows.num_used}"

    def _free_duplicates(self, kv: KVState, already: int) -> None:
        if already > kv.cache_protected_len:
            self.slots.free(kv.slots[kv.cache_protected_len:already])

    def _unlock(self, kv: KVState) -> None:
        if kv.last_node is not None:
            self.tree.unlock(kv.last_node)
            kv.last_node = None


class _FreeList:
    """Ids ``first .. end - 1`` on a free stack, with an in-use flag per id to catch double frees."""

    def __init__(self, first: int, end: int, what: str) -> None:
        self._first = first
        self._end = end
        self._what = what
        self._free: list[int] = list(range(end - 1, first - 1, -1))  # pop() hands out low ids first
        self._in_use = bytearray(end)

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self._end - self._first - len(self._free)

    def alloc(self, n: int) -> list[int] | None:
        """``n`` distinct ids, or ``None`` (and nothing taken) when fewer than ``n`` are free."""
        if n < 0:
            raise ValueError(f"alloc: n must be >= 0, got {n}")
        if n > len(self._free):
            return None
        ids = self._free[len(self._free) - n:]
        del self._free[len(self._free) - n:]
        for i in ids:
            self._in_use[i] = 1
        return ids

    def free(self, ids: Iterable[int]) -> None:
        """Return ids to the free list; a reserved, out-of-range, or not-in-use id raises ``ValueError``.

        The check runs over all ids before any is freed, so a bad call changes nothing.
        """
        ids = [_as_index(i) for i in ids]
        seen: set[int] = set()
        for i in ids:
            if not self._first <= i < self._end:
                raise ValueError(f"free: {self._what} {i!r} is reserved or out of range "
                                 f"[{self._first}, {self._end})")
            if not self._in_use[i] or i in seen:
                raise ValueError(f"free: {self._what} {i} is not in use (double free)")
            seen.add(i)
        for i in ids:
            self._in_use[i] = 0
        self._free.extend(ids)

    def is_used(self, i: int) -> bool:
        """Whether id ``i`` is currently handed out."""
        return self._first <= i < self._end and bool(self._in_use[i])


def _as_index(i: object) -> int:
    try:
        return operator.index(i)
    except TypeError:
        raise ValueError(f"free: ids must be integers, got {i!r}") from None


class SlotAllocator(_FreeList):
    """KV-pool slots ``1 .. num_slots - 1``; slot 0 is the reserved padding slot.

    ``alloc(n) -> list[int] | None``, ``free(slots)``, ``num_free``, ``num_used``.
    """

    def __init__(self, num_slots: int) -> None:
        if num_slots < 2:
            raise ValueError(f"num_slots must be >= 2 (slot 0 is reserved), got {num_slots}")
        super().__init__(1, num_slots, "slot")


class ReqSlotAllocator(_FreeList):
    """Rows ``0 .. max_reqs - 1`` of the req_to_token table, one per running request.

    Same methods as ``SlotAllocator``; no row is reserved.
    """

    def __init__(self, max_reqs: int) -> None:
        if max_reqs < 1:
            raise ValueError(f"max_reqs must be >= 1, got {max_reqs}")
        super().__init__(0, max_reqs, "request row")
