"""Regexes of the JSON numbers that are multiples of given divisors (``multipleOf``), sound under
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
from fractions import Fraction
from typing import TYPE_CHECKING

from radixlm.constrained.pattern.int_range import integer_range_regex

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
            memo[fracs] = _fraction(fracs, k)
        if memo[fracs]:
            parts.append(memo[fracs])
    if not parts:
        return ""
    if len(parts) == 1 and not optional:
        return parts[0]
    return "(" + "|".join(parts) + ")" + ("?" if optional else "")


def _fraction(fracs: frozenset[int], k: int) -> str:
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
