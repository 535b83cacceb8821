"""Exact regexes for integer ranges, and sound regexes for bounded JSON numbers.

Integers are written without leading zeros and without ``-0``; a range bound of None means
unbounded on that side.
"""

from __future__ import annotations

import math

INTEGER = r"(0|-?[1-9][0-9]*)"
NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_FRACTION = r"(\.[0-9]+)?"


def _digit_class(lo: str, hi: str) -> str:
    return lo if lo == hi else f"[{lo}-{hi}]"


def _same_length(lo: str, hi: str) -> list[str]:
    """Alternatives matching exactly the decimal strings in [lo, hi] (equal lengths)."""
    n = len(lo)
    if n == 1:
        return [_digit_class(lo, hi)]
    if lo[0] == hi[0]:
        return [lo[0] + _group(_same_length(lo[1:], hi[1:]))]
    if lo[1:] == "0" * (n - 1) and hi[1:] == "9" * (n - 1):
        return [f"{_digit_class(lo[0], hi[0])}[0-9]{{{n - 1}}}"]
    parts = [lo[0] + _group(_same_length(lo[1:], "9" * (n - 1)))]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(f"{_digit_class(str(int(lo[0]) + 1), str(int(hi[0]) - 1))}[0-9]{{{n - 1}}}")
    parts.append(hi[0] + _group(_same_length("0" * (n - 1), hi[1:])))
    return parts


def _group(parts: list[str]) -> str:
    # outlines-core compiles alternations leftmost-first: once an earlier branch completes a
    # match, later branches die. Longer numbers (later parts) go first so "12" survives "1".
    parts = parts[::-1]
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"


def _natural_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the naturals in [lo, hi] (hi None: unbounded), lo >= 0."""
    if hi is not None and hi < lo:
        return []
    parts: list[str] = []
    length = len(str(lo))
    start = lo
    while hi is None or start <= hi:
        top = 10**length - 1
        if hi is not None and hi <= top:
            return parts + _same_length(str(start), str(hi))
        if hi is None and start == 10 ** (length - 1) and length > 1:
            return parts + [f"[1-9][0-9]{{{length - 1},}}"]
        parts += _same_length(str(start), str(top))
        start, length = top + 1, length + 1
    return parts


def integer_range_regex(lo: int | None, hi: int | None) -> str | None:
    """Regex of exactly the integers in [lo, hi] (None: unbounded); None if the range is empty."""
    if lo is None and hi is None:
        return INTEGER
    if lo is not None and hi is not None and lo > hi:
        return None
    parts: list[str] = []
    if hi is None or hi >= 0:
        parts += _natural_range(max(lo, 0) if lo is not None else 0, hi)
    if lo is None or lo < 0:
        neg = _natural_range(max(-hi, 1) if hi is not None else 1, -lo if lo is not None else None)
        if neg:
            parts.append("-" + _group(neg))
    return _group(parts) if parts else None


def _magnitude(lo: int, lo_excl: bool, hi: int | None) -> list[str]:
    """Decimal magnitudes m (no exponent) with lo <(=) m <= hi, lo >= 0, hi integer or None."""
    parts = []
    first = lo + 1 if lo_excl else lo
    if lo_excl:  # lo itself with a non-zero fraction, if still below hi
        if hi is None or lo < hi:
            parts.append(f"{lo}\\.[0-9]*[1-9]")
    ints = _natural_range(first, None if hi is None else hi - 1)
    if ints:
        parts.append(_group(ints) + _FRACTION)
    if hi is not None and hi >= first:
        parts.append(f"{hi}(\\.0+)?")
    return parts


def number_range_regex(
    lo: float | None, lo_excl: bool, hi: float | None, hi_excl: bool
) -> str | None:
    """A regex of numbers x within the bounds; exact for integer bounds, rounded inward otherwise.

    Bounded numbers are written without an exponent (an under-approximation). None if empty.
    """
    if lo is None and hi is None:
        return NUMBER
    lo_i = hi_i = None
    if lo is not None:
        lo_i = math.ceil(lo)
        lo_excl = lo_excl and lo_i == lo  # a fractional bound rounds up to an inclusive integer
    if hi is not None:
        hi_i = math.floor(hi)
        if hi_excl or hi_i != hi:  # strictly below ceil(hi) -> at most the integer below
            hi_i = math.ceil(hi) - 1
    if lo_i is not None and hi_i is not None and (lo_i > hi_i or (lo_i == hi_i and lo_excl)):
        return None
    parts = []
    if hi_i is None or hi_i >= 0:
        if lo_i is None or lo_i < 0:
            parts += _magnitude(0, False, hi_i)
        else:
            parts += _magnitude(lo_i, lo_excl, hi_i)
    if lo_i is None or lo_i < 0:
        # x = -m < 0: m > 0 when hi >= 0, else m >= -hi; m <= -lo (strictly when lo is exclusive).
        top = None if lo_i is None else -lo_i
        if lo_excl and top is not None:
            top -= 1  # -m > lo: m < -lo; integer part below -lo, fraction any
        base, base_excl = (0, True) if hi_i is None or hi_i >= 0 else (-hi_i, False)
        neg = _magnitude(base, base_excl, top) if top is None or top >= base else []
        if neg:
            parts.append("-" + _group(neg))
    return _group(parts) if parts else None
