"""Field checks shared by ``SamplingParams`` and ``ServerArgs``: each raises ``ValueError`` naming the field."""

from __future__ import annotations

import math
from typing import Any


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> None:
    """``value`` is an integer (not a bool), inside ``[lo, hi]`` when given."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")


def check_num(name: str, value: Any, lo: float | None = None, hi: float | None = None) -> None:
    """``value`` is a finite real number (not a bool, NaN or infinity), inside ``[lo, hi]`` when given."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")


def check_bools(obj: Any, names: tuple[str, ...]) -> None:
    """Every attribute ``names`` of ``obj`` is a bool."""
    for name in names:
        if not isinstance(getattr(obj, name), bool):
            raise ValueError(f"{name} must be a boolean")
