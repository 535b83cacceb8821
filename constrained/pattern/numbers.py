"""Regexes of JSON numbers: integer and decimal ranges, and ``multipleOf``.

Ranges: Exact regexes for integer ranges and for bounded JSON numbers (decimals without exponent).

Integers are written without leading zeros and without ``-0``; a range bound of None means
unbounded on that side.

``multipleOf``: Regexes of the JSON numbers that are multiples of given divisors (``multipleOf``), sound under
``jsonschema``'s own check: ``instance % d`` for an int divisor, ``int(q) != q`` with the float
``q = instance / d`` for a float divisor (so ``0.07`` is *not* a multiple of ``0.01``).

Values are handled as scaled integers ``N = x * 10**K`` (``K`` fraction digits, fewer when
``MAX_PER_UNIT`` needs it): ``x`` is a multiple of every divisor exactly when ``M | N``. Two cases:

- *exact*: every divisor is an int, or a float whose decimal value is its binary value (``2.5``,
  ``0.25``, ``12.0``), so every multiple passes the check (floats: within ``2**52``-ish bounds,
  where the arithmetic is exact). When ``M`` divides a power of ten the last digits decide, and
  the regex is exact for the whole range (``integer_range_regex`` for the leading digits, a small
  trie for the last ones).
- otherwise (``0.01``, ``0.1``, ``3``, ``12``, ``1.5``): a window of candidates nearest the lower
  bound (or zero) is enumerated, float divisors are checked value by value with the very float
  operations ``jsonschema`` performs, and the survivors become a trie over the integer part whose
  leaves carry the allowed fractions (identical subtrees share one character class, so runs of
  integer parts with the same fractions stay compact).

A value is written without exponent, as its integer part and optionally its fraction with any of
the trailing zeros up to ``K`` digits (``1``, ``1.5``, ``1.50``); integers never as ``-0``.
"""

from __future__ import annotations

import math
import sys
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, localcontext
from fractions import Fraction
from typing import TYPE_CHECKING

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


if TYPE_CHECKING:
    import numpy as np

MAX_PER_UNIT = 100  # fraction digits are dropped until at most so many multiples lie in a unit
MAX_DIGITS = 9  # integer digits of multiples of float divisors (longer ones: costly automata)
MAX_SUFFIXES = 1000  # exact last-digit rule only when that many residues suffice
MAX_CHECKED = 1_000_000  # candidates enumerated (and float-checked) per sign
MAX_KEYS = (4000, 1000, 250, 60)  # integer parts per sign, tried in turn until the regex is small
MAX_CHARS = 10_000  # per sign; the automaton (and its token masks) grows with it
_SAFE = 2**52  # |values| (scaled) below this: float conversions and quotients are exact


def multiples_regex(divisors: list[int | float], integer: bool, lo: float | None, lo_x: bool,
                    hi: float | None, hi_x: bool) -> str | None:
    """Regex of numbers that are multiples of every divisor (all > 0) within the bounds; only
    integers (no fraction) when ``integer``. None when no value is generated."""
    k, m = _scale(divisors, integer)
    floats = [d for d in divisors if isinstance(d, float)]
    exact = all(Fraction(d) == _decimal(d) for d in floats)
    a, b = _scaled_bounds(lo, lo_x, hi, hi_x, 10**k, _cap(floats, exact, 10**k))
    if a is not None and b is not None and a > b:
        return None
    sides = []  # (sign, smallest magnitude, largest magnitude or None)
    if b is None or b >= 0:
        sides.append(("", max(a, 0) if a is not None else 0, b))
    if a is None or a < 0:
        sides.append(("-", max(-b, 1) if b is not None else 1, None if a is None else -a))
    j = max(_exponent(m, 2), _exponent(m, 5), k)
    suffix = exact and 10**j % m == 0 and 10**j // m <= MAX_SUFFIXES
    alts = []
    for sign, s_lo, s_hi in sides:
        if s_hi is not None and s_hi < s_lo:
            continue
        # Both signs allowed: the negative side gets a smaller window (values near the positive
        # side's start matter more, and every window costs automaton states).
        share = 4 if sign and len(sides) == 2 else 1
        parts = (_suffix_side(s_lo, s_hi, m, j, k) if suffix
                 else _window_side(s_lo, s_hi, m, k, [] if exact else floats, share))
        if parts:
            alts.append(sign + _alt(parts) if sign else _alt(parts))
    return _alt(alts) if alts else None


def _scale(divisors: list[int | float], integer: bool) -> tuple[int, int]:
    """(k, m): values are N / 10**k with m | N. k is the divisors' decimals, lowered until at most
    ``MAX_PER_UNIT`` multiples fall in one unit (a restriction: ``0.001`` -> 2 decimals)."""
    k = 0 if integer else max(_decimals(d) for d in divisors)
    while True:
        m = 1
        for d in divisors:  # x * 10**k is a multiple of d * 10**k = p/q (lowest terms) iff p | it
            m = math.lcm(m, (_decimal(d) * 10**k).numerator)
        if k == 0 or 10**k // m <= MAX_PER_UNIT:
            return k, m
        k -= 1


def _decimal(d: int | float) -> Fraction:
    """The decimal value the schema wrote (``0.1`` -> 1/10), not the float's binary value."""
    return Fraction(repr(d)) if isinstance(d, float) else Fraction(d)


def _decimals(d: int | float) -> int:
    den = _decimal(d).denominator
    return max(_exponent(den, 2), _exponent(den, 5))


def _exponent(n: int, p: int) -> int:
    e = 0
    while n % p == 0:
        n, e = n // p, e + 1
    return e


def _cap(floats: list[float], exact: bool, scale: int) -> int | None:
    """Largest scaled magnitude generated: float arithmetic must stay exact (None: unbounded)."""
    if not floats:
        return None  # int divisors: jsonschema's check is exact integer arithmetic
    if not exact:
        cap = _SAFE  # every value is checked numerically; N and N/scale convert exactly
    else:  # value * denominator and value / d both stay below 2**52
        cap = min(min(_SAFE // Fraction(d).denominator, math.floor(_SAFE * Fraction(d))) for d in floats) * scale
    digits = min(len(str(cap + 1)) - 1, MAX_DIGITS + len(str(scale)) - 1)
    return 10**digits - 1  # all numbers of up to so many digits: a short regex


def _scaled_bounds(lo, lo_x, hi, hi_x, scale: int, cap: int | None) -> tuple[int | None, int | None]:
    """Scaled bounds [a, b] such that x = N/scale satisfies the bounds the way ``jsonschema``
    compares them (the parsed int or float against the bound); an empty range has a > b."""
    a, b = (None, None) if cap is None else (-cap, cap)
    if lo is not None:
        n = math.ceil(Fraction(lo) * scale) if a is None else max(math.ceil(Fraction(lo) * scale), a)
        while (b is None or n <= b) and not _within(n, scale, lo, lo_x, 1):
            n += 1  # rounding may put the parsed float on an exclusive bound
        a = n
    if hi is not None:
        n = math.floor(Fraction(hi) * scale) if b is None else min(math.floor(Fraction(hi) * scale), b)
        while (a is None or n >= a) and not _within(n, scale, hi, hi_x, -1):
            n -= 1
        b = n
    return a, b


def _within(n: int, scale: int, bound: float, excl: bool, side: int) -> bool:
    """Both forms of N/scale (the int when integral, the float when a fraction can be written:
    scale > 1) satisfy the bound under Python's comparisons."""
    values = ([n // scale] if n % scale == 0 else []) + ([n / scale] if scale > 1 else [])
    if side > 0:
        return all(v > bound if excl else v >= bound for v in values)
    return all(v < bound if excl else v <= bound for v in values)


def _suffix_side(lo: int, hi: int | None, m: int, j: int, k: int) -> list[str]:
    """Naturals N in [lo, hi] with m | N, where m | 10**j: the last j digits decide. Values of
    more than j digits are a range of leading digits followed by a trie of allowed endings."""
    block = 10**j
    parts = []
    for q_lo, q_hi, r_lo, r_hi in reversed(_blocks(lo, hi, block)):  # larger values first
        lead = _leading(q_lo, q_hi)
        endings = _entries(range(-(-r_lo // m) * m, r_hi + 1, m), k, j - k)
        if endings and lead is not None:
            parts.append(lead + _trie(endings, k))
    top = block - 1 if hi is None else min(hi, block - 1)
    small = _entries(range(-(-lo // m) * m, top + 1, m), k, None)
    if small:
        parts.append(_trie(small, k))
    return parts


def _leading(lo: int, hi: int | None) -> str | None:
    """Regex of the integers in [lo, hi], lo >= 1; "all numbers of 1..n digits" kept short (the
    generic range lists each length, which makes a slower automaton)."""
    if lo == 1 and hi is not None and str(hi + 1).strip("0") == "1":
        return f"[1-9][0-9]{{0,{len(str(hi)) - 1}}}" if hi > 9 else "[1-9]"
    return integer_range_regex(lo, hi)


def _blocks(lo: int, hi: int | None, block: int) -> list[tuple[int, int | None, int, int]]:
    """[lo, hi] ∩ [block, ∞) as (leading lo, leading hi, ending lo, ending hi) pieces."""
    p_lo, p_hi = max(lo // block, 1), None if hi is None else hi // block
    if p_hi is not None and p_lo > p_hi:
        return []
    r_lo = lo % block if lo // block == p_lo else 0
    r_hi = block - 1 if hi is None else hi % block
    if p_lo == p_hi:
        return [(p_lo, p_hi, r_lo, r_hi)]
    pieces = [(p_lo, p_lo, r_lo, block - 1)] if r_lo > 0 else []
    mid_lo, mid_hi = p_lo + (r_lo > 0), None if p_hi is None else p_hi - (r_hi < block - 1)
    if mid_hi is None or mid_lo <= mid_hi:
        pieces.append((mid_lo, mid_hi, 0, block - 1))
    if r_hi < block - 1:
        pieces.append((p_hi, p_hi, 0, r_hi))
    return pieces


def _window_side(lo: int, hi: int | None, m: int, k: int, checked: list[float], share: int) -> list[str]:
    """Naturals N >= lo (<= hi) with m | N nearest lo, float divisors ``checked`` value by value;
    the window shrinks until the regex is small (a restriction: larger values are not generated)."""
    scale = 10**k
    start = -(-lo // m) * m
    stop = start + m * MAX_CHECKED if hi is None else min(hi + 1, start + m * MAX_CHECKED)
    stop = min(stop, start + MAX_KEYS[0] // share * max(m, scale))  # past the widest window: unused
    if checked:  # capped: N < 2**52, so int64 and the float conversions are exact
        import numpy as np  # here, not at the top: compile workers import numpy for such schemas alone

        values = np.arange(start, stop, m, dtype=np.int64)
        for d in checked:  # exactly jsonschema's test: q = instance / d; int(q) == q
            q = (values / scale) / d
            values = values[np.isfinite(q) & (q == np.floor(q))]
    rx = None
    for keys in MAX_KEYS:
        end = min(stop, start + keys // share * max(m, scale))  # about keys / share integer parts
        entries = (_grouped(values[values < end], scale) if checked
                   else _entries(range(start, end, m), k, None))
        rx = _trie(entries, k) if entries else None
        if rx is None or len(rx) <= MAX_CHARS:
            break
    return [rx] if rx is not None else []


def _grouped(values: np.ndarray, scale: int) -> dict[str, frozenset[int]]:
    """``_entries`` of sorted values, vectorised: integer part -> fractions."""
    import numpy as np

    if not len(values):
        return {}
    ints, fracs = values // scale, values % scale
    starts = np.flatnonzero(np.r_[True, ints[1:] != ints[:-1]])
    bounds = starts.tolist() + [len(fracs)]
    sets: dict[bytes, frozenset[int]] = {}  # a few dozen distinct sets among thousands of parts
    out = {}
    for i, a, b in zip(ints[starts].tolist(), bounds, bounds[1:]):
        raw = fracs[a:b].tobytes()
        found = sets.get(raw)
        if found is None:
            found = sets[raw] = frozenset(fracs[a:b].tolist())
        out[str(i)] = found
    return out


def _entries(values, k: int, width: int | None) -> dict[str, frozenset[int]]:
    """Integer part -> its fractions (scaled by 10**k). The integer part is written canonically
    (``width`` None), zero-padded to ``width`` digits, or not at all (``width`` 0)."""
    scale = 10**k
    out: dict[str, set[int]] = {}
    for n in values:
        i, f = divmod(n, scale)
        key = str(i) if width is None else (str(i).zfill(width) if width else "")
        out.setdefault(key, set()).add(f)
    return {key: frozenset(fs) for key, fs in out.items()}


def _trie(entries: dict[str, frozenset[int]], k: int) -> str:
    """Regex of the strings key + fraction: a trie over the keys whose terminal nodes carry
    their fractions; siblings with identical subtrees share one character class."""
    root: dict = {}
    for key, fracs in entries.items():
        node = root
        for ch in key:
            node = node.setdefault(ch, {})
        node[""] = fracs
    return _node(root, k, {})


def _node(node: dict, k: int, memo: dict) -> str:
    groups: dict[str, list[str]] = {}
    for ch in sorted(c for c in node if c):
        groups.setdefault(_node(node[ch], k, memo), []).append(ch)
    parts = [_chars(chs) + rx for rx, chs in groups.items()]
    optional = False
    if "" in node:  # a value ends here: as an integer (fraction 0) and/or with a fraction
        fracs = node[""]
        optional = 0 in fracs
        if fracs not in memo:
            memo[fracs] = _fraction_forms(fracs, k)
        if memo[fracs]:
            parts.append(memo[fracs])
    if not parts:
        return ""
    if len(parts) == 1 and not optional:
        return parts[0]
    return "(" + "|".join(parts) + ")" + ("?" if optional else "")


def _fraction_forms(fracs: frozenset[int], k: int) -> str:
    """A dot and the fraction digits of each value, followed by 0 .. k - len trailing zeros."""
    forms = {}
    for f in fracs:
        digits = str(f).zfill(k).rstrip("0") if k else ""
        for z in range(0 if digits else 1, k - len(digits) + 1):
            forms[digits + "0" * z] = frozenset({0})
    return "\\." + _trie(forms, 0) if forms else ""


def _chars(chs: list[str]) -> str:
    """A character class of sorted digits, with ranges for runs of three or more."""
    if len(chs) == 1:
        return chs[0]
    runs: list[list[str]] = []
    for c in chs:
        if runs and ord(c) == ord(runs[-1][-1]) + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return "[" + "".join(r[0] + "-" + r[-1] if len(r) >= 3 else "".join(r) for r in runs) + "]"


def _alt(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "(" + "|".join(parts) + ")"
