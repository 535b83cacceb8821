"""Linear-time, incremental ``stop_regex`` matching: a Pike VM over Python's own regex parser.

Each pattern compiles once (cached by its text) into a small program of at most
``MAX_STOP_REGEX_PROGRAM`` instructions. A ``StopRegexMatcher`` is fed only the new text at each
step and keeps its live threads between steps, so a step costs O(new characters x program size)
whatever the pattern: nothing backtracks. Threads keep Python's priorities (leftmost start, then
greedy/lazy and alternation order), so the match found is the one ``re.search`` finds on the
text fed so far. Constructs a finite automaton cannot express, or that need text not yet
generated (backreferences, lookarounds, ``$``, ``\\b``, possessive and atomic groups), and the
``IGNORECASE``/``MULTILINE``/``LOCALE`` flags, raise ``StopRegexError``.
"""

from __future__ import annotations

import functools
import re

try:  # the regex parser and its opcodes: Python >= 3.11
    import re._constants as sre_c
    import re._parser as sre_parse
except ImportError:  # Python 3.10
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

MAX_STOP_REGEX_PROGRAM = 512  # instructions per pattern: bounds the work per character
MAX_STOP_REGEX_TOTAL = 2048  # instructions of all a request's patterns together

_CHAR, _SPLIT, _JMP, _BOL, _MATCH = range(5)
_CATEGORIES = {
    sre_c.CATEGORY_DIGIT: str.isdecimal,
    sre_c.CATEGORY_SPACE: str.isspace,
    sre_c.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
}
_NOT = {sre_c.CATEGORY_NOT_DIGIT: sre_c.CATEGORY_DIGIT, sre_c.CATEGORY_NOT_SPACE: sre_c.CATEGORY_SPACE,
        sre_c.CATEGORY_NOT_WORD: sre_c.CATEGORY_WORD}
_UNSUPPORTED_FLAGS = re.IGNORECASE | re.MULTILINE | re.LOCALE | re.ASCII


class StopRegexError(ValueError):
    """A pattern that is invalid, too large, or uses a construct the matcher does not support."""


@functools.lru_cache(maxsize=256)
def compile_stop_regex(pattern: str) -> tuple:
    """The matcher program of ``pattern`` (cached by text); raises ``StopRegexError``."""
    if len(pattern) > 4 * MAX_STOP_REGEX_PROGRAM:
        raise StopRegexError(f"is longer than {4 * MAX_STOP_REGEX_PROGRAM} characters")
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, OverflowError, RecursionError) as e:
        raise StopRegexError(f"is not a valid regular expression: {e}") from None
    flags = parsed.state.flags
    if flags & _UNSUPPORTED_FLAGS:
        raise StopRegexError("uses an unsupported flag (IGNORECASE, MULTILINE, LOCALE and ASCII are not supported)")
    prog: list = []
    emitter = _Emitter(prog, dotall=bool(flags & re.DOTALL))
    try:
        emitter.seq(parsed)
    except RecursionError:
        raise StopRegexError("nests too deeply for the stop matcher") from None
    emitter.emit((_MATCH,))
    return tuple(prog)


def check_stop_regexes(patterns: list[str]) -> None:
    """Compile every pattern and bound their total size; raises ``StopRegexError`` naming the pattern."""
    total = 0
    for pattern in patterns:
        try:
            total += len(compile_stop_regex(pattern))
        except StopRegexError as e:
            raise StopRegexError(f"stop_regex {pattern[:100]!r} {e}") from None
    if total > MAX_STOP_REGEX_TOTAL:
        raise StopRegexError(f"stop_regex patterns total {total} matcher states, more than {MAX_STOP_REGEX_TOTAL}")


class _Emitter:
    """Appends the instructions of a parsed pattern to ``prog``, raising once it grows too large."""

    def __init__(self, prog: list, dotall: bool) -> None:
        self.prog, self.dotall = prog, dotall

    def emit(self, op: tuple) -> int:
        if len(self.prog) >= MAX_STOP_REGEX_PROGRAM:
            raise StopRegexError(f"is too large for the stop matcher (over {MAX_STOP_REGEX_PROGRAM} states)")
        self.prog.append(op)
        return len(self.prog) - 1

    def seq(self, items) -> None:
        for op, av in items:
            self.item(op, av)

    def item(self, op, av) -> None:
        if op is sre_c.LITERAL:
            self.emit((_CHAR, chr(av).__eq__))
        elif op is sre_c.NOT_LITERAL:
            self.emit((_CHAR, chr(av).__ne__))
        elif op is sre_c.ANY:
            self.emit((_CHAR, (lambda c: True) if self.dotall else "\n".__ne__))
        elif op is sre_c.IN:
            self.emit((_CHAR, _class_test(av)))
        elif op is sre_c.SUBPATTERN:
            group, add_flags, del_flags, body = av
            if add_flags or del_flags:
                raise StopRegexError("uses inline flags inside a group, which are not supported")
            self.seq(body)
        elif op is sre_c.BRANCH:
            self.branch(av[1])
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            self.repeat(*av, greedy=op is sre_c.MAX_REPEAT)
        elif op is sre_c.AT and av in (sre_c.AT_BEGINNING, sre_c.AT_BEGINNING_STRING):
            self.emit((_BOL,))
        else:
            raise StopRegexError(f"uses {str(op).lower()}, which the stop matcher does not support "
                                 "(no backreferences, lookarounds, $, \\b, possessive or atomic groups)")

    def branch(self, alternatives) -> None:
        jumps = []
        for i, alt in enumerate(alternatives):
            if i < len(alternatives) - 1:
                split = self.emit(None)
                self.seq(alt)
                jumps.append(self.emit(None))
                self.prog[split] = (_SPLIT, split + 1, len(self.prog))
            else:
                self.seq(alt)
        for j in jumps:
            self.prog[j] = (_JMP, len(self.prog))

    def repeat(self, lo: int, hi: int, body, greedy: bool) -> None:
        if lo > MAX_STOP_REGEX_PROGRAM:  # even an empty body: never loop that long
            raise StopRegexError(f"is too large for the stop matcher (over {MAX_STOP_REGEX_PROGRAM} states)")
        for _ in range(lo):
            self.seq(body)
        if hi == sre_c.MAXREPEAT:
            split = self.emit(None)
            self.seq(body)
            self.emit((_JMP, split))
            self._split(split, len(self.prog), greedy)
            return
        splits = []
        for _ in range(hi - lo):
            splits.append(self.emit(None))
            self.seq(body)
        for split in splits:
            self._split(split, len(self.prog), greedy)

    def _split(self, at: int, out: int, greedy: bool) -> None:
        self.prog[at] = (_SPLIT, at + 1, out) if greedy else (_SPLIT, out, at + 1)


def _class_test(items):
    """The test of one character class (``[...]``, ``\\d``, ...) as a function of a character."""
    negate, chars, ranges, cats = False, set(), [], []
    for op, av in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            chars.add(chr(av))
        elif op is sre_c.RANGE:
            ranges.append((chr(av[0]), chr(av[1])))
        elif op is sre_c.CATEGORY and av in _CATEGORIES:
            cats.append((_CATEGORIES[av], True))
        elif op is sre_c.CATEGORY and av in _NOT:
            cats.append((_CATEGORIES[_NOT[av]], False))
        else:
            raise StopRegexError(f"uses {op} {av} in a character class, which the stop matcher does not support")

    def test(c: str) -> bool:
        hit = c in chars or any(a <= c <= b for a, b in ranges) or any(f(c) == want for f, want in cats)
        return hit != negate
    return test


class StopRegexMatcher:
    """Finds the earliest match of any of ``patterns`` in text fed to it piece by piece."""

    def __init__(self, patterns: list[str]) -> None:
        self.programs = [compile_stop_regex(p) for p in patterns]
        self.pos = 0  # characters fed so far
        self.steps = 0  # thread steps taken (the work done; for tests)
        self.threads = [self._start([], set(), prog, 0) for prog in self.programs]
        self.best: list = [None] * len(self.programs)

    def search(self, text: str) -> tuple[int, str] | None:
        """The earliest match (start, matched text) in ``text``, as ``re.search`` finds it, or
        None. ``text`` is all the output so far and extends the text of the last call: only the
        characters after it are scanned."""
        new = text[self.pos:]
        first = None
        for i, prog in enumerate(self.programs):
            found = self._feed_one(i, prog, new)
            if found is not None and (first is None or found[0] < first[0]):
                first = found
        self.pos = len(text)
        return None if first is None else (first[0], text[first[0]:first[1]])

    def _feed_one(self, i: int, prog: tuple, text: str) -> tuple[int, int] | None:
        clist, best, pos = self.threads[i], self.best[i], self.pos
        for c in text:
            if not clist and best is not None:
                break
            nlist, seen = [], set()
            for pc, start in clist:
                op = prog[pc]
                self.steps += 1
                if op[0] == _MATCH:
                    best = (start, pos)
                    break  # threads after a match have lower priority
                if op[1](c):
                    self._add(nlist, seen, prog, pc + 1, start, pos + 1)
            pos += 1
            clist = nlist if best is not None else self._start(nlist, seen, prog, pos)
        for pc, start in clist:
            if prog[pc][0] == _MATCH:
                best = (start, pos)
                break
        self.threads[i], self.best[i] = clist, best
        return best

    def _start(self, lst: list, seen: set, prog: tuple, pos: int) -> list:
        self._add(lst, seen, prog, 0, pos, pos)
        return lst

    def _add(self, lst: list, seen: set, prog: tuple, pc: int, start: int, pos: int) -> None:
        stack = [pc]
        while stack:
            pc = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            op = prog[pc]
            self.steps += 1
            if op[0] == _JMP:
                stack.append(op[1])
            elif op[0] == _SPLIT:
                stack.extend((op[2], op[1]))
            elif op[0] == _BOL:
                if pos == 0:
                    stack.append(pc + 1)
            else:
                lst.append((pc, start))

    def safe_len(self) -> int:
        """How much of the text can no longer be part of a match: everything before the earliest
        start a live thread holds (or before the text not yet scanned)."""
        starts = [start for threads in self.threads for _, start in threads]
        return min(starts, default=self.pos)
