"""``wait_for``: poll a condition until it holds, with a hang guard (a guard, not a timing assertion)."""

from __future__ import annotations

import time


def wait_for(cond, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.02)
