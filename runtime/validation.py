"""Field checks shared by ``SamplingParams`` and ``ServerArgs``: each raises ``FieldError`` naming the field."""

from __future__ import annotations

import math
from typing import Any


class FieldError(ValueError):
    """Bad input in one named field; ``field`` is its name (the HTTP error's ``param``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> None:
    """``value`` is an integer (not a bool), inside ``[lo, hi]`` when given."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise FieldError(name, f"{name} must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise FieldError(name, f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise FieldError(name, f"{name} must be <= {hi}, got {value}")


def check_num(name: str, value: Any, lo: float | None = None, hi: float | None = None) -> None:
    """``value`` is a finite real number (not a bool, NaN or infinity), inside ``[lo, hi]`` when given."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise FieldError(name, f"{name} must be a finite number, got {value!r}")
    if lo is not None and value < lo:
        raise FieldError(name, f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise FieldError(name, f"{name} must be <= {hi}, got {value}")


def check_bools(obj: Any, names: tuple[str, ...]) -> None:
    """Every attribute ``names`` of ``obj`` is a bool."""
    for name in names:
        if not isinstance(getattr(obj, name), bool):
            raise FieldError(name, f"{name} must be a boolean")
