"""``FairQueue``: the compile queue, round-robin between callers.

First come, first served let one caller's burst of slow compiles hold every later caller's
trivial one behind it. Here each caller (``CompileJob.caller``: the engine's per-call id, as the
scheduler's fair admission uses) has its own FIFO lane, and a slot takes the head of the lane
served least recently: a caller that arrives while another has N jobs queued waits for at most
one job per other caller, not N.
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict, deque
from typing import Any


class FairQueue:
    """A blocking queue of items in per-caller lanes, served round-robin (thread-safe)."""

    def __init__(self) -> None:
        self._lanes: OrderedDict[Any, deque] = OrderedDict()  # rotation order: next served first
        self._cond = threading.Condition()
        self._waiting = 0  # getters blocked in ``get`` (counted until they pop)

    def put(self, item: Any, caller: Any = None) -> None:
        """Queue ``item`` at the end of ``caller``'s lane (a new caller joins the rotation last)."""
        with self._cond:
            lane = self._lanes.get(caller)
            if lane is None:
                lane = self._lanes[caller] = deque()
            lane.append(item)
            self._cond.notify()

    def get(self) -> Any:
        """The head of the next lane in the rotation, waiting for one; that lane goes last."""
        with self._cond:
            self._waiting += 1
            try:
                while not self._lanes:
                    self._cond.wait()
                return self._pop()
            finally:
                self._waiting -= 1

    def get_nowait(self) -> Any:
        """As ``get``, but ``queue.Empty`` when nothing is queued."""
        with self._cond:
            if not self._lanes:
                raise queue.Empty
            return self._pop()

    def unserved(self) -> int:
        """Items queued beyond the getters waiting for one (> 0: none is free to take the last)."""
        with self._cond:
            return sum(len(lane) for lane in self._lanes.values()) - self._waiting

    def __len__(self) -> int:
        with self._cond:
            return sum(len(lane) for lane in self._lanes.values())

    def _pop(self) -> Any:
        caller, lane = self._lanes.popitem(last=False)
        item = lane.popleft()
        if lane:
            self._lanes[caller] = lane
        return item
