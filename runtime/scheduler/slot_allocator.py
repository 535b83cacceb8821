"""Free lists for KV-pool slots and req_to_token rows (plain Python; never imports torch).

The scheduler keeps its accounts with these: ``SlotAllocator`` hands out KV slots (slot 0 is
reserved as the padding slot and is never handed out), ``ReqSlotAllocator`` hands out rows of the
``req_to_token`` table, one per running request.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable


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
