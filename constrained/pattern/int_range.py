"""Exact regexes for integer ranges and for bounded JSON numbers (decimals without exponent).

Integers are written without leading zeros and without ``-0``; a range bound of None means
unbounded on that side.
"""

from __future__ import annotations

import math
import sys
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, localcontext

INTEGER = r"(0|-?[1-9][0-9]*)"
NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_FRACTION = r"(\.[0-9]+)?"
_QUANTUM = Decimal("1e-15")
MAX_BOUND_DIGITS = 400  # integer digits of a bound (a double has at most 309); more raise ValueError
# Exact arithmetic for every bound up to MAX_BOUND_DIGITS digits with 15 fraction digits.
BOUND_CONTEXT = Context(prec=MAX_BOUND_DIGITS + 40)
_MAX_DOUBLE = Decimal(sys.float_info.max)  # an integer: its exact value
_OVERFLOW = _MAX_DOUBLE + 2**970  # the decimals at least this large parse to inf
SIGNIFICANT = 17  # digits kept of a bound past 10**17 (rounded inward: a restriction)
_EXACT_FROM = 2**53  # doubles at least this large are integers, and repr() is not their value


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
    """Alternatives for the naturals in [lo, hi] (hi None: unbounded), lo >= 0. Whole lengths in
    a row share one repetition (``[1-9][0-9]{1,307}``), so a 309-digit bound stays small."""
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
        full = len(str(hi)) - 1 if hi is not None else length  # lengths wholly inside [start, hi]
        if start == 10 ** (length - 1) and length > 1 and full > length:
            parts.append(f"[1-9][0-9]{{{length - 1},{full - 1}}}")
            start, length = 10**full, full + 1
            continue
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


def _decimal_bound(v: int | float, excl: bool, lower: bool) -> Decimal:
    """An inclusive decimal bound B such that every decimal x >= B (lower) or x <= B (upper)
    passes ``jsonschema``'s comparison against ``v``: x parses to an int (no fraction: compared
    exactly) or to the nearest double (rounding is monotone), so B is a double on the right side
    of ``v``, written as its value where ints and ``repr`` would disagree (``2**53`` and up)."""
    if isinstance(v, int) and abs(v) > _MAX_DOUBLE:  # no double: only ints compare exactly to it
        if (v > 0) != lower:  # fractions past the double range parse to inf: stop at the largest
            return _MAX_DOUBLE if v > 0 else -_MAX_DOUBLE
        return significant(Decimal(v + (1 if excl else 0) if lower else v - (1 if excl else 0)), lower)
    d = float(v)
    if lower and (d < v or (excl and d == v)):
        d = math.nextafter(d, math.inf)
    elif not lower and (d > v or (excl and d == v)):
        d = math.nextafter(d, -math.inf)
    if math.isinf(d):  # past the largest double: decimals from here on parse to inf (or are ints)
        return _OVERFLOW if lower else -_OVERFLOW
    b = significant(Decimal(d), lower) if abs(d) >= _EXACT_FROM else Decimal(repr(d))
    # Bounds like 5e-324 (exclusive 0) would spell hundreds of digits: round inward instead.
    return b.quantize(_QUANTUM, rounding=ROUND_CEILING if lower else ROUND_FLOOR)


def significant(b: Decimal, lower: bool) -> Decimal:
    """``b`` rounded inward to ``SIGNIFICANT`` significant digits: a 309-digit bound would nest one
    regex group per digit (past llguidance's nesting limit); a double has 17 digits of precision."""
    if not b or b.adjusted() < SIGNIFICANT:
        return b
    step = Decimal(1).scaleb(b.adjusted() - SIGNIFICANT + 1)
    return b.quantize(step, rounding=ROUND_CEILING if lower else ROUND_FLOOR).quantize(Decimal(1))


def _split_decimal(x: Decimal) -> tuple[int, str]:
    """(integer part, fraction digits without trailing zeros) of a non-negative decimal."""
    text = format(x, "f")
    whole, _, frac = text.partition(".")
    return int(whole), frac.rstrip("0")


def _fraction_tail(a: str, b: str | None, i: int, tl: bool, th: bool) -> str | None:
    """Digit strings d (possibly empty) continuing a fraction at position ``i`` such that the
    fraction stays >= 0.a (while ``tl``: equal to a so far) and <= 0.b (while ``th``)."""
    if not tl and not th:
        return "[0-9]*"
    n = max(len(a), len(b or ""))
    if i >= n:  # both bounds are exhausted: their remaining digits are zeros
        return "0*" if th else "[0-9]*"
    lo_d = int(a[i]) if tl and i < len(a) else 0
    hi_d = (int(b[i]) if i < len(b) else 0) if th and b is not None else 9
    alts = []
    for d_lo, d_hi, ntl, nth in _digit_groups(lo_d, hi_d, tl, th):
        tail = _fraction_tail(a, b, i + 1, ntl, nth)
        if tail is not None:
            alts.append(_digit_class(str(d_lo), str(d_hi)) + tail)
    may_end = not tl or all(c == "0" for c in a[i:])  # ending = the remaining digits are zeros
    if not alts:
        return "" if may_end else None
    body = alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"
    return f"({body})?" if may_end else body


def _digit_groups(lo_d: int, hi_d: int, tl: bool, th: bool) -> list[tuple[int, int, bool, bool]]:
    """Digits lo_d..hi_d grouped by whether they keep the lower/upper bound tight."""
    groups: list[tuple[int, int, bool, bool]] = []
    for c in range(lo_d, hi_d + 1):
        key = (tl and c == lo_d, th and c == hi_d)
        if groups and groups[-1][2:] == key:
            groups[-1] = (groups[-1][0], c, *key)
        else:
            groups.append((c, c, *key))
    return groups


def _fraction(a: str, b: str | None) -> str | None:
    """The optional fraction part (``(\\.d+)?``) of numbers with 0.a <= fraction <= 0.b."""
    tail = _fraction_tail(a, b, 0, True, b is not None)
    if tail is None:
        return None
    may_end = not a
    nonempty = tail[1:-2] if may_end and tail.endswith(")?") else tail
    if nonempty in ("", "0*"):
        return "" if nonempty == "" else r"(\.0+)?"
    if nonempty == "[0-9]*":
        return _FRACTION
    return f"(\\.{nonempty})?" if may_end else f"\\.{nonempty}"


def _magnitude(lo: Decimal, hi: Decimal | None) -> list[str]:
    """Alternatives for the non-negative decimals m (no exponent) with lo <= m <= hi."""
    li, lf = _split_decimal(lo)
    if hi is None:
        parts = [f"{li}{_fraction(lf, None)}"] if lf else []
        ints = _natural_range(li + 1 if lf else li, None)
        return parts + ([_group(ints) + _FRACTION] if ints else [])
    hi_i, hf = _split_decimal(hi)
    if li == hi_i:
        frac = _fraction(lf, hf)
        return [] if frac is None else [f"{li}{frac}"]
    parts = [f"{li}{_fraction(lf, None)}"] if lf else []
    ints = _natural_range(li + 1 if lf else li, hi_i - 1)
    if ints:
        parts.append(_group(ints) + _FRACTION)
    return parts + [f"{hi_i}{_fraction('', hf)}"]


def number_range_regex(
    lo: float | None, lo_excl: bool, hi: float | None, hi_excl: bool
) -> str | None:
    """A regex of exactly the exponent-free JSON numbers x within the bounds, as ``jsonschema``
    compares them (x parsed to an int or a double); None if the range is empty. Bounds needing
    more than 15 fraction digits are rounded inward; ValueError past ``MAX_BOUND_DIGITS``."""
    if lo is None and hi is None:
        return NUMBER
    for v in (lo, hi):
        if isinstance(v, int) and len(str(abs(v))) > MAX_BOUND_DIGITS:
            raise ValueError(f"a bound of more than {MAX_BOUND_DIGITS} digits is not supported")
    with localcontext(BOUND_CONTEXT):
        return _number_range(lo, lo_excl, hi, hi_excl)


def _number_range(lo: float | None, lo_excl: bool, hi: float | None, hi_excl: bool) -> str | None:
    low = None if lo is None else _decimal_bound(lo, lo_excl, lower=True)
    high = None if hi is None else _decimal_bound(hi, hi_excl, lower=False)
    if low is not None and high is not None and low > high:
        return None
    parts = []
    if high is None or high >= 0:
        parts += _magnitude(max(low, Decimal(0)) if low is not None else Decimal(0), high)
    if low is None or low < 0:  # x = -m; "-0" is zero, inside the range here
        m_lo = -high if high is not None and high < 0 else Decimal(0)
        neg = _magnitude(m_lo, None if low is None else -low)
        if neg:
            parts.append("-" + _group(neg))
    return _group(parts) if parts else None
