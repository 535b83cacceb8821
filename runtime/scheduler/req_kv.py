"""``KVState``: a request's KV accounting, owned by ``ReqCache`` (plain Python, no torch).

Memory regions along ``fill_ids = origin_input_ids + output_ids`` (see ``req.py``)::

    position: 0                 cache_protected_len        kv_len             len(fill_ids)
              |<-- radix-cache nodes -->|<-- owned slots -->|<-- no KV yet ---->|

``slots[i]`` is the KV slot of position ``i`` for ``i < kv_len``. The scheduler sets
``extend_len`` (how many positions one step computes); everything else changes only through
``ReqCache`` (admit, cache_unfinished, release).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class KVState:
    """Slots, lengths, the locked radix node and the req_to_token row of one request."""

    slots: list[int] = field(default_factory=list)
    kv_len: int = 0  # positions whose K/V are in the pool
    cache_protected_len: int = 0  # positions below this belong to the radix tree (locked via last_node)
    last_node: Any = None  # the radix-cache node locked for this request, or None
    req_pool_idx: int | None = None  # this request's row of the req_to_token table while it holds KV
    extend_len: int = 0  # positions the current step computes

    @property
    def holds_kv(self) -> bool:
        return self.req_pool_idx is not None

    def reset(self) -> None:
        """Forget everything (after release: retraction, jump-forward re-queue, abort)."""
        self.slots = []
        self.kv_len = self.cache_protected_len = self.extend_len = 0
        self.last_node = None
        self.req_pool_idx = None
