r"""A pattern narrowed to ``minLength``/``maxLength``, the measures that narrowing needs, and the
exact regexes over the canonical encoding that the lexeme algebra complements.

``minLength``/``maxLength`` together with a ``pattern`` or ``format``: narrow the repetitions of
the pattern's token tree until every string it matches has a length within the bounds.

Every character node matches exactly one decoded character, so lengths are exact arithmetic over
the tree. Narrowing only removes strings (sound): lower bounds of repetitions are raised until
the shortest match reaches ``minLength``; branches that cannot fit ``maxLength`` are dropped and
upper bounds lowered to one common cap, the largest that keeps the longest match within
``maxLength`` and the automaton small (``pattern.bounds``). The unanchored ends of a pattern are
free-character repetitions; with a ``maxLength`` they become unambiguous (the prefix avoids the
body's first characters, the suffix starts with a character the body never uses), since counted
ambiguous ends blow up the automaton.

Measures: Measures of pattern token trees (sre_parse tokens plus ``FREE``): the shortest and longest
match, and the automaton size guard: the number of states of the subset-construction DFA of a
token tree, over decoded characters.

Capping a ``*`` into ``{0,n}`` is harmless in ``[a-z]{0,n}\.`` but explodes in
``[a-z]{0,n}a[a-z]{0,n}`` (the automaton remembers every count at which an ``a`` was seen: up to
2^n states, out of memory in outlines-core). The bounds narrowing (``pattern.bounds``) measures
its candidates here and keeps one whose automaton stays small. The count is a proxy for the states
the core's lazy lexer can reach in the lexeme (each one a mask to compute when it is reached).

Canonical encoding: Exact regexes over the *canonical* JSON encoding of strings, for the lexeme algebra
(``&``, ``~``) that intersections and negations of string schemas compile to.

A complement is only sound when the regex it complements holds *every* encoding of every string it
stands for. JSON has many encodings of one string (``a`` or ``\u0061``, ``/`` or ``\/``), so the
algebra works over one encoding per string, the one ``json.dumps(..., ensure_ascii=False)`` writes:
plain characters as themselves, ``\"`` and ``\\``, ``\b \f \n \r \t``, other control
characters as ``\u00xx`` (lower-case hex), no surrogate escapes. Over that set encoding is a
bijection, so ``~R`` (intersected with ``CANON_CHAR*``) is exactly the complement of ``R``.

Patterns are translated exactly, characters classes aside: ``wide=False`` gives the strings both
ECMA-262 and Python's ``re`` (which ``jsonschema`` uses) match (an under-approximation, for a
pattern that must hold), ``wide=True`` those either matches (an over-approximation, for a pattern
under an odd number of ``not``\ s). ``$`` ends the string (ECMA), or with ``wide`` also comes
before a final newline (Python).
"""

from __future__ import annotations

import json
import math

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.pattern.ecma import (
    FREE,
    MAX_PATTERN_REPEAT,
    _negate,
    _split,
    char_ranges,
    free_run,
    parse_pattern,
    ranges_regex,
    search_tokens,
    sre_c,
)
from radixlm.constrained.pattern.regex_text import escape_literal

MAX_POSITIONS = 20000  # expanded character positions; larger trees count as too big

REPEATS = (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT)  # the repetition ops sre_parse emits
_INF = math.inf


def min_len(tokens: list) -> int:
    """Length of the shortest string the token sequence matches."""
    return seq_size(tokens, False)


def max_len(tokens: list) -> float:
    """Length of the longest string the token sequence matches (``math.inf`` if unbounded)."""
    return sum(item_max(op, av) for op, av in tokens)


def seq_size(tokens: list, tight: bool) -> int:
    """The shortest match (``tight``: the longest once every repetition is at its lower bound)."""
    return sum(item_size(op, av, tight) for op, av in tokens)


def item_size(op, av, tight: bool) -> int:
    """``seq_size`` of one token."""
    if op in REPEATS:
        return av[0] * seq_size(av[2], tight)
    if op is sre_c.SUBPATTERN:
        return seq_size(av[-1], tight)
    if op is sre_c.BRANCH:
        return (max if tight else min)(seq_size(b, tight) for b in av[1])
    return 1


def item_min(op, av) -> int:
    """Shortest match of one token."""
    return item_size(op, av, False)


def item_max(op, av) -> float:
    """Longest match of one token."""
    if op in REPEATS:
        sub = max_len(av[2])
        return 0 if sub == 0 or av[1] == 0 else (_INF if av[1] is sre_c.MAXREPEAT else av[1] * sub)
    if op is sre_c.SUBPATTERN:
        return max_len(av[-1])
    if op is sre_c.BRANCH:
        return max(max_len(b) for b in av[1])
    return 1


def positions(tokens: list) -> int:
    """Character positions once counted repetitions are expanded: the size of a linear automaton."""
    total = 0
    for op, av in tokens:
        if op in REPEATS:
            total += (av[0] + 1 if av[1] is sre_c.MAXREPEAT else av[1]) * positions(av[2])
        elif op is sre_c.SUBPATTERN:
            total += positions(av[-1])
        elif op is sre_c.BRANCH:
            total += sum(positions(b) for b in av[1])
        else:
            total += 1
    return total


def dfa_states(tokens: list, limit: int, pointer: str = "#") -> int:
    """States of the DFA of ``tokens`` (full match), counting stops at ``limit + 1``."""
    builder = _Glushkov(pointer)
    try:
        _, first, _ = builder.seq(tokens)
    except _TooBig:
        return limit + 1
    builder.follow[0] = first
    atom_pos = builder.atoms()
    seen, todo = {1}, [1]  # a DFA state: the set of positions just read (bit 0: the start)
    while todo:
        state = todo.pop()
        reach = 0
        while state:
            low = state & -state
            reach |= builder.follow[low.bit_length() - 1]
            state ^= low
        for mask in atom_pos:
            nxt = reach & mask
            if nxt and nxt not in seen:
                if len(seen) > limit:
                    return limit + 1
                seen.add(nxt)
                todo.append(nxt)
    return len(seen)


class _TooBig(Exception):
    pass


class _Glushkov:
    """Position automaton: one position per character node, counted repeats expanded."""

    def __init__(self, pointer: str) -> None:
        self.pointer = pointer
        self.sets: list[tuple] = [()]
        self.follow: list[int] = [0]
        # (op, id(av)) -> its ranges: a counted repeat expands one node many times; the tokens
        # outlive the builder, so their ids are stable while it runs
        self._ranges: dict[tuple, tuple | None] = {}

    def _pos(self, ranges: tuple) -> int:
        if len(self.sets) >= MAX_POSITIONS:
            raise _TooBig
        self.sets.append(ranges)
        self.follow.append(0)
        return len(self.sets) - 1

    def _char(self, op, av) -> tuple | None:
        key = (op, id(av))
        if key not in self._ranges:
            ranges = char_ranges(op, av, self.pointer)
            self._ranges[key] = None if ranges is None else tuple(ranges)
        return self._ranges[key]

    def _link(self, last: int, first: int) -> None:
        while last:
            low = last & -last
            self.follow[low.bit_length() - 1] |= first
            last ^= low

    def _cat(self, a: tuple, b: tuple) -> tuple:
        self._link(a[2], b[1])
        return (a[0] and b[0], a[1] | (b[1] if a[0] else 0), b[2] | (a[2] if b[0] else 0))

    def seq(self, tokens: list) -> tuple[bool, int, int]:
        """(nullable, first positions, last positions) of a token sequence."""
        out = (True, 0, 0)
        for op, av in tokens:
            out = self._cat(out, self._node(op, av))
        return out

    def _node(self, op, av) -> tuple[bool, int, int]:
        ranges = self._char(op, av)
        if ranges is not None:
            bit = 1 << self._pos(ranges)
            return (False, bit, bit)
        if op is sre_c.SUBPATTERN:
            return self.seq(av[-1])
        if op is sre_c.BRANCH:
            parts = [self.seq(b) for b in av[1]]
            return (any(p[0] for p in parts), _union(p[1] for p in parts), _union(p[2] for p in parts))
        if op in REPEATS:
            return self._repeat(*av)
        raise ValueError(f"unexpected token {op}")

    def _repeat(self, lo: int, hi: int, sub: list) -> tuple[bool, int, int]:
        out = (True, 0, 0)
        for _ in range(lo):
            out = self._cat(out, self.seq(sub))
        if hi is sre_c.MAXREPEAT:
            body = self.seq(sub)
            self._link(body[2], body[1])
            return self._cat(out, (True, body[1], body[2]))
        tail = None  # X{0,k} as (X(X(X)?)?)?, the shape regex compilers build
        for _ in range(hi - lo):
            part = self.seq(sub)
            tail = (True, part[1], part[2]) if tail is None else self._opt_cat(part, tail)
        return out if tail is None else self._cat(out, tail)

    def _opt_cat(self, part: tuple, tail: tuple) -> tuple:
        both = self._cat(part, tail)
        return (True, both[1], both[2])

    def atoms(self) -> list[int]:
        """Per class of characters no position tells apart: the mask of positions accepting it."""
        distinct = sorted(set(self.sets[1:]))
        cuts = sorted({a for s in distinct for a, _ in s} | {b + 1 for s in distinct for _, b in s})
        by_set = {s: 0 for s in distinct}
        for i, s in enumerate(self.sets):
            if i:
                by_set[s] |= 1 << i
        signatures: dict[tuple, int] = {}
        for point in cuts:
            sig = tuple(s for s in distinct if any(a <= point <= b for a, b in s))
            if sig and sig not in signatures:
                signatures[sig] = _union(by_set[s] for s in sig)
        return list(signatures.values())


def _union(masks) -> int:
    out = 0
    for m in masks:
        out |= m
    return out


MAX_DFA_STATES = 500  # per narrowed string: about half a second of index building on 32k tokens


def within_length(alts: list, lo: int, hi: int | None) -> bool:
    """Whether every string the pattern alternatives search-match has a length in [lo, hi]."""
    tree = search_tokens(alts)
    return min_len(tree) >= lo and (hi is None or max_len(tree) <= hi)


def narrow_to_length(alts: list, lo: int, hi: int | None, pointer: str) -> tuple[list | None, str]:
    """A token tree matching a subset of the strings the pattern alternatives (see
    ``parse_pattern``) search-match, all of length within [lo, hi] (``hi`` None: unbounded),
    or (None, the keyword that cannot be satisfied)."""
    tree = _cap(_bounded_search(alts, pointer) if hi is not None else search_tokens(alts), None)
    budget = _budget(tree, pointer) if hi is None else 0
    for option in _raise_options(tree, lo, union=True):
        if hi is None:  # raised lower bounds may cost what a linear automaton of them costs
            limit = max(budget, positions(option) + MAX_DFA_STATES)
            best = option if dfa_states(option, limit, pointer) <= limit else None
        else:
            best = None
            for tight in (False, True):
                pruned = _prune(option, hi, tight) if best is None else None
                best = best if pruned is None else _largest_cap(pruned, hi, pointer)
        # The caps of the emitter are applied already: these are the final regex's lengths.
        if best is not None and min_len(best) >= lo and (hi is None or max_len(best) <= hi):
            return best, ""
    return None, "minLength" if hi is None or max_len(tree) < lo else "maxLength"


def _budget(base: list, pointer: str) -> int:
    """DFA states a narrowing of ``base`` may have: MAX_DFA_STATES, or as many as ``base`` (up
    to 8 times that): narrowing must not be what makes the automaton big."""
    return max(MAX_DFA_STATES, dfa_states(base, 8 * MAX_DFA_STATES, pointer))


def _largest_cap(tree: list, hi: int, pointer: str) -> list | None:
    """``tree`` with its repetitions capped so that the longest match is within ``hi`` and the
    automaton stays small (both grow with the caps), or None: first the largest common cap, then
    the repetitions double their own caps in turns while the result still fits."""
    paths = _repeat_paths(tree)
    if max_len(_cap(tree, dict.fromkeys(paths, 0))) > hi:
        return None
    budget = _budget(_cap(tree, dict.fromkeys(paths, 0)), pointer)

    def short(caps: dict) -> bool:
        return max_len(_cap(tree, caps)) <= hi

    def fits(caps: dict) -> bool:
        capped = _cap(tree, caps)
        return max_len(capped) <= hi and dfa_states(capped, budget, pointer) <= budget

    def largest(low: int, high: int, caps_for) -> int:
        # Both tests are monotone in each cap, and the length alone is cheap: when the automaton
        # is small at the largest cap the length allows, that cap is the answer; only otherwise
        # is the automaton measured at every step of the search (below it).
        top = _largest_where(low, high, lambda c: short(caps_for(c)))
        return top if fits(caps_for(top)) else _largest_where(low, top - 1, lambda c: fits(caps_for(c)))

    # The emitter caps counts at MAX_PATTERN_REPEAT anyway: no cap needs to go beyond it.
    tops = {path: min(top, MAX_PATTERN_REPEAT) for path, top in paths.items()}
    common = largest(0, MAX_PATTERN_REPEAT, lambda c: dict.fromkeys(paths, c))
    caps = dict.fromkeys(paths, common)
    growing = [path for path in paths if tops[path] > common]
    while growing:  # rounds of doubling, so that no early repetition takes all the room
        for path in list(growing):
            want = min(tops[path], 2 * caps[path] + 1)
            if fits({**caps, path: want}):
                caps[path] = want
            else:
                caps[path] = largest(caps[path], want - 1, lambda c, p=path: {**caps, p: c})
            if caps[path] < want or want == tops[path]:
                growing.remove(path)
    return _cap(tree, caps)


def _largest_where(low: int, high: int, test) -> int:
    """The largest ``c`` in [low, high] that passes the monotone ``test`` (``low`` when none
    above it does)."""
    while low < high:  # binary search
        mid = (low + high + 1) // 2
        low, high = (mid, high) if test(mid) else (low, mid - 1)
    return low


def _repeat_paths(tokens: list, path: tuple = ()) -> dict[tuple, int]:
    """Every repetition of the tree, by position, with its upper bound (in tree order)."""
    out: dict[tuple, int] = {}
    for i, (op, av) in enumerate(tokens):
        if op in REPEATS:
            out[path + (i,)] = av[1]
            out.update(_repeat_paths(av[2], path + (i,)))
        elif op is sre_c.SUBPATTERN:
            out.update(_repeat_paths(av[-1], path + (i,)))
        elif op is sre_c.BRANCH:
            for j, b in enumerate(av[1]):
                out.update(_repeat_paths(b, path + (i, j)))
    return out


def _cap(tokens: list, caps: dict | None, path: tuple = ()) -> list:
    """Upper bounds lowered to their cap in ``caps`` (by position) and to the emitter's cap,
    never below the lower bound; repetitions left with no copy are removed."""
    out = []
    for i, (op, av) in enumerate(tokens):
        where = path + (i,)
        if op in REPEATS:
            lo, hi, sub = av
            if caps is not None:
                hi = max(lo, min(hi, caps[where]))
            if hi is not sre_c.MAXREPEAT:
                hi = max(lo, min(hi, MAX_PATTERN_REPEAT))
            if hi:
                out.append((op, (lo, hi, _cap(sub, caps, where))))
        elif op is sre_c.SUBPATTERN:
            out.append((op, av[:-1] + (_cap(av[-1], caps, where),)))
        elif op is sre_c.BRANCH:
            out.append((op, (None, [_cap(b, caps, where + (j,)) for j, b in enumerate(av[1])])))
        else:
            out.append((op, av))
    return out


def _prune(seq: list, budget: int, tight: bool = False) -> list | None:
    """Drop what can only match longer than ``budget``: branches whose shortest match does not
    fit beside the rest, copies of repetitions beyond the room left. None if nothing fits.
    ``tight`` also drops what does not fit once every repetition is at its lower bound, so
    that the result fits ``budget`` with all caps at zero (a stronger restriction)."""
    if min_len(seq) > budget:
        return None
    sizes = [item_size(op, av, tight) for op, av in seq]
    out = []
    for (op, av), size in zip(seq, sizes):
        room = budget - (sum(sizes) - size)
        if op in REPEATS:
            lo, hi, sub = av
            per = (room // lo if tight else room - (lo - 1) * min_len(sub)) if lo else room
            sub = _prune(sub, per, tight)
            if sub is None:
                if lo:
                    return None
                continue
            one = seq_size(sub, tight)
            out.append((op, (lo, max(lo, min(hi, room // one)) if one else hi, sub)))
        elif op is sre_c.SUBPATTERN:
            sub = _prune(av[-1], room, tight)
            if sub is None:
                return None
            out.append((op, av[:-1] + (sub,)))
        elif op is sre_c.BRANCH:
            kept = [b for b in (_prune(b, room, tight) for b in av[1]) if b is not None]
            if not kept:
                return None
            out.append((op, (None, kept)))
        elif room < 1:
            return None
        else:
            out.append((op, av))
    return out


def _raise_options(seq: list, need: int, union: bool = False) -> list[list]:
    """Narrowings of ``seq`` whose shortest match is at least ``need``, best first: the union of
    the one-item raises (with ``union``), each one-item raise (least overshoot first), else one
    raise spread over several items. Empty if none exists."""
    cur = min_len(seq)
    if cur >= need:
        return [seq]
    raised = []  # (position, raised item); with ``union`` (the top) also per-copy variants
    for i, item in enumerate(seq):
        for per_copy in (False, True) if union and item[0] in REPEATS else (False,):
            new = _raise_item(item, item_min(*item) + need - cur, per_copy)
            if new is not None and (i, new) not in raised:
                raised.append((i, new))
    if union and len(raised) == 1 and seq[raised[0][0]][0] is sre_c.SUBPATTERN:  # choose inside
        i, (op, av) = raised[0][0], seq[raised[0][0]]
        return [seq[:i] + [(op, av[:-1] + (sub,))] + seq[i + 1:]
                for sub in _raise_options(av[-1], item_min(op, av) + need - cur, union=True)]
    cands = sorted((seq[:i] + [new] + seq[i + 1:] for i, new in raised), key=min_len)
    if union and len(cands) > 1:
        return [[(sre_c.BRANCH, (None, cands))]] + cands
    if cands:
        return cands
    spread = _raise_spread(seq, need - cur)
    return [spread] if spread is not None else []


def _raise_seq(seq: list, need: int) -> list | None:
    options = _raise_options(seq, need)
    return options[0] if options else None


def _raise_spread(seq: list, deficit: int) -> list | None:
    """Raise items in order, each as far as it goes, until ``deficit`` is made up."""
    out = list(seq)
    for i, (op, av) in enumerate(out):
        if deficit <= 0:
            break
        m = item_min(op, av)
        target = min(m + deficit, item_max(op, av))
        new = _raise_item((op, av), int(target)) if target > m else None
        if new is not None:
            out[i] = new
            deficit -= item_min(*new) - m
    return out if deficit <= 0 else None


def _raise_item(item: tuple, target: int, per_copy: bool = False) -> tuple | None:
    """``item`` narrowed so that its shortest match is at least ``target``, or None. A
    repetition gets more copies, or with ``per_copy`` longer ones (fewer counted copies: in
    ``([a-z]+-?)+`` that keeps the automaton small)."""
    op, av = item
    if item_min(op, av) >= target:
        return item
    if op is sre_c.SUBPATTERN:
        sub = _raise_seq(av[-1], target)
        return None if sub is None else (op, av[:-1] + (sub,))
    if op is sre_c.BRANCH:
        kept = [b for b in (_raise_seq(b, target) for b in av[1]) if b is not None]
        return (op, (None, kept)) if kept else None
    if op not in REPEATS:
        return None
    lo, hi, sub = av
    if hi == 0 or max_len(sub) == 0:
        return None
    sub = [(FREE, True) if o == FREE else (o, a) for o, a in sub]  # counted: plain characters
    ms = min_len(sub)
    if ms == 0:
        sub = _raise_seq(sub, 1)
        return None if sub is None else _raise_item((op, (lo, hi, sub)), target)
    count = -(-target // ms)
    if per_copy and max(lo, 1) < count and max(lo, 1) <= hi:
        sub = _raise_seq(sub, -(-target // max(lo, 1)))
        return None if sub is None else (op, (max(lo, 1), hi, sub))
    if hi is sre_c.MAXREPEAT or count <= hi:
        return (op, (count, hi, sub))
    sub = _raise_seq(sub, -(-target // hi))
    return None if sub is None else (op, (hi, hi, sub))


def _bounded_search(alts: list, pointer: str) -> list:
    """``search_tokens`` with unambiguous unanchored ends (see the module docstring)."""
    seqs = []
    for start, end, body in alts:
        if min_len(body) == 0 and not (start and end):  # matches everywhere: any string
            seqs.append([free_run()])
            continue
        seq = [(sre_c.SUBPATTERN, (None, 0, 0, body))]
        prefix = None if start else _not_in(_chars(body, pointer, first=True), pointer)
        if prefix is not None:
            seq.insert(0, (sre_c.MAX_REPEAT, (0, sre_c.MAXREPEAT, [prefix])))
        suffix = None if end else _not_in(_chars(body, pointer), pointer)
        if suffix is not None:
            seq.append((sre_c.MAX_REPEAT, (0, 1, [suffix, free_run()])))
        seqs.append(seq)
    return seqs[0] if len(seqs) == 1 else [(sre_c.BRANCH, (None, seqs))]


def _not_in(ranges: list, pointer: str) -> tuple | None:
    """A class of the characters outside ``ranges`` (None if no emittable one is left)."""
    node = (sre_c.IN, [(sre_c.NEGATE, None)] + [(sre_c.RANGE, r) for r in ranges])
    return node if ranges_regex(char_ranges(*node, pointer)) is not None else None


def _chars(tokens: list, pointer: str, first: bool = False) -> list:
    """Every character a match of ``tokens`` can contain (with ``first``: can start with)."""
    out = []
    for op, av in tokens:
        ranges = char_ranges(op, av, pointer)
        if ranges is None:
            subs = ([av[2]] if av[1] else []) if op in REPEATS else (
                [av[-1]] if op is sre_c.SUBPATTERN else av[1])  # a branch
            ranges = [r for sub in subs for r in _chars(sub, pointer, first)]
        out += ranges
        if first and item_min(op, av):
            break
    return out


_SHORT = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}
# One character in its canonical encoding (surrogates are never escaped, so astral characters
# appear raw: one code point, as Python counts them).
CANON_CHAR = r'([^"\\\x00-\x1f]|\\["\\bfnrt]|\\u00(0[0-7bef]|1[0-9a-f]))'
NOTHING = "[^\\x00-\\x{10ffff}]"  # a regex that matches no text
MAX_COUNT = 10_000  # counted repetitions past this raise (each count is lexer state)
_CLASS_SPECIAL = set("\\]^-[&~")


def canon_text(text: str) -> str:
    """Regex matching exactly the canonical encoding of ``text`` (no quotes)."""
    return escape_literal(json.dumps(text, ensure_ascii=False)[1:-1])


def canon_class(ranges: list[tuple[int, int]]) -> str | None:
    """Regex of one character from ``ranges`` in its canonical encoding (None when empty)."""
    merged = _negate(_negate(ranges))
    if len(merged) == 1 and merged[0][0] == merged[0][1] and 0x20 <= merged[0][0] < 0x7F and merged[0][0] not in (0x22, 0x5C):
        return escape_literal(chr(merged[0][0]))  # one plain character (completion hints read these runs)
    plain = []
    for lo, hi in merged:
        for a, b in _split(max(lo, 0x20), hi, (0x22, 0x5C)):
            for c, d in ((a, min(b, 0xD7FF)), (max(a, 0xE000), b)):  # surrogates are not characters
                if c <= d:
                    plain.append((c, d))
    alts = ["[" + "".join(_cp(a) if a == b else f"{_cp(a)}-{_cp(b)}" for a, b in plain) + "]"] if plain else []
    escaped = {cp for lo, hi in merged for cp in range(lo, min(hi, 0x5C) + 1) if cp < 0x20 or cp in (0x22, 0x5C)}
    alts += [e for cp, e in ((0x22, r'\\"'), (0x5C, r"\\\\")) if cp in escaped]
    alts += [f"\\\\{e}" for cp, e in sorted(_SHORT.items()) if cp in escaped]
    for high in (0, 1):  # \u000x and \u001x
        lows = [cp & 0xF for cp in range(high * 16, high * 16 + 16) if cp not in _SHORT and cp in escaped]
        if lows:
            alts.append(f"\\\\u00{high}[{''.join(f'{x:x}' for x in lows)}]")
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")"


def _cp(cp: int) -> str:
    c = chr(cp)
    if c in _CLASS_SPECIAL:
        return "\\" + c
    return f"\\x{{{cp:x}}}" if cp > 0x7E or cp < 0x21 else c


def pattern_regex(pattern: str, pointer: str, wide: bool) -> str:
    """Regex over canonical bodies of the strings that ``re.search``-match ``pattern`` (see the
    module docstring for ``wide``). Raises ``ConstraintError`` for constructs it cannot translate
    exactly (lookarounds, backreferences, flags, ``\\b``, anchors inside the pattern or ``\\Z``,
    which ECMA reads as a letter)."""
    alts = []
    for start, end, body in parse_pattern(pattern, pointer):
        rx = _emit(body, pointer, wide)
        head = "" if start else f"{CANON_CHAR}*"
        tail = (r"(\\n)?" if wide else "") if end else f"{CANON_CHAR}*"
        alts.append(f"{head}({rx}){tail}")
    if "\\Z" in pattern.replace("\\\\", ""):
        raise ConstraintError(f"\\Z in pattern {pattern!r} is not supported", pointer, "pattern")
    return alts[0] if len(alts) == 1 else "(" + "|".join(f"({a})" for a in alts) + ")"


def narrowed_regex(pattern: str, lo: int, hi: int | None, pointer: str) -> str | None:
    """Regex over canonical bodies of a subset of the strings that ``re.search``-match
    ``pattern`` (read as with ``wide=False``), all of ``lo``..``hi`` characters: the pattern
    when every match already fits, else its repetitions narrowed (``narrow_to_length``);
    None when no narrowing fits. Cheaper for the matcher than a pattern intersected with a long
    counted length."""

    alts = parse_pattern(pattern, pointer)
    if within_length(alts, lo, hi):
        return pattern_regex(pattern, pointer, False)
    tokens, _ = narrow_to_length(alts, lo, hi, pointer)
    return None if tokens is None else _emit(tokens, pointer, False)


def _emit(tokens, pointer: str, wide: bool) -> str:
    return "".join(_emit_one(op, av, pointer, wide) for op, av in tokens)


def _emit_one(op, av, pointer: str, wide: bool) -> str:
    ranges = char_ranges(op, av, pointer, wide)
    if ranges is not None:
        rx = canon_class(ranges)
        return rx if rx is not None else NOTHING
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):  # greediness does not change what matches
        lo, hi, sub = av
        if max(lo, 0 if hi is sre_c.MAXREPEAT else hi) > MAX_COUNT:
            raise ConstraintError(f"counted repetitions above {MAX_COUNT} are not supported", pointer, "pattern")
        count = f"{{{lo},}}" if hi is sre_c.MAXREPEAT else f"{{{lo},{hi}}}"
        return f"({_emit(sub, pointer, wide)}){count}"
    if op is sre_c.SUBPATTERN:
        if av[1] or av[2]:
            raise ConstraintError("inline flags in a pattern are not supported", pointer, "pattern")
        return "(" + _emit(av[-1], pointer, wide) + ")"
    if op is sre_c.BRANCH:
        return "(" + "|".join(_emit(b, pointer, wide) for b in av[1]) + ")"
    raise ConstraintError(f"unsupported construct {str(op).lower()} in pattern", pointer, "pattern")
