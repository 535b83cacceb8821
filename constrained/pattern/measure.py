"""Measures of pattern token trees (sre_parse tokens plus ``FREE``): the shortest and longest
match, and the automaton size guard: the number of states of the subset-construction DFA of a
token tree, over decoded characters.

Capping a ``*`` into ``{0,n}`` is harmless in ``[a-z]{0,n}\\.`` but explodes in
``[a-z]{0,n}a[a-z]{0,n}`` (the automaton remembers every count at which an ``a`` was seen: up to
2^n states, out of memory in outlines-core). The bounds narrowing (``pattern.bounds``) measures
its candidates here and keeps one whose automaton stays small. The count is a proxy for the states
the core's lazy lexer can reach in the lexeme (each one a mask to compute when it is reached).
"""

from __future__ import annotations

import math

from radixlm.constrained.pattern.chars import char_ranges, sre_c

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
