"""Field checks shared by ``SamplingParams`` and ``ServerArgs``: each raises ``ValueError`` naming the field."""

from __future__ import annotations

from typing import Any


def check_int(name: str, value: Any, lo: int | None = None) -> None:
    """``value`` is an integer (not a bool), at least ``lo`` when given."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")


def check_num(name: str, value: Any, lo: float | None = None, hi: float | None = None) -> None:
    """``value`` is a real number (not a bool, not NaN), inside ``[lo, hi]`` when given."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise ValueError(f"{name} must be a number, got {value!r}")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")


def check_bools(obj: Any, names: tuple[str, ...]) -> None:
    """Every attribute ``names`` of ``obj`` is a bool."""
    for name in names:
        if not isinstance(getattr(obj, name), bool):
            raise ValueError(f"{name} must be a boolean")
