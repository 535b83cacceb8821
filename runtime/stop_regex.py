"""Linear-time, incremental ``stop_regex`` matching: a Pike VM over interegular's parse of the
pattern, the exact match from the ``regex`` module.

A pattern is checked once (cached by its text): a scan of its text refuses what a finite automaton
cannot express or what needs text not yet generated (backreferences, lookarounds, ``$``, ``\\b``,
possessive and atomic groups, inline flags other than a leading ``(?s)``), ``re.compile`` checks
its syntax, and interegular's public ``parse_pattern`` gives its parse tree, which compiles into a
program of at most ``MAX_STOP_REGEX_PROGRAM`` instructions (a Thompson automaton: ``^`` is its
one zero-width instruction).

A ``StopRegexMatcher`` is fed only the new text at each step and keeps its live threads (one per
program state, with the earliest start that reaches it) between steps, so a step costs
O(new characters x program size) whatever the pattern: nothing backtracks, and this bound is the
matcher's protection against patterns that make a backtracking engine explode (``(a*)*b``). Once a
match exists in the text so far, the leftmost start among them is the start of the match
``re.search`` returns; its end (greedy and lazy quantifiers, alternation order) is the ``regex``
module's match anchored there, once per request (the request stops at it), bounded by
``EXACT_MATCH_TIMEOUT_S`` (past it, the longest match from that start is used). ``\\d``, ``\\s``,
``\\w`` and their negations keep Python's Unicode meaning (interegular's are ASCII): the scan marks
them, as it marks ``^``, and the program tests them as Python does.
"""

from __future__ import annotations

import functools
import re

import interegular
import regex
from interegular.patterns import InvalidSyntax, Unsupported

MAX_STOP_REGEX_PROGRAM = 512  # instructions per pattern: bounds the work per character
MAX_STOP_REGEX_TOTAL = 2048  # instructions of all a request's patterns together
EXACT_MATCH_TIMEOUT_S = 0.5  # the anchored match of a found stop (greedy/lazy priorities)

_CHAR, _SPLIT, _JMP, _BOL, _MATCH = range(5)
_BOL_MARK = "\U0010fffd"  # ``^`` outside a class, as interegular (which has no ``^``) reads it
_RESERVED = range(0x10FFF0, 0x10FFFE)  # the marks' code points: a pattern may not hold them


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"


# ``\d`` ``\s`` ``\w`` (and negations) as marks interegular reads as plain characters -> Python's test
_CLASS_MARKS = {"d": "\U0010fff0", "s": "\U0010fff1", "w": "\U0010fff2",
                "D": "\U0010fff3", "S": "\U0010fff4", "W": "\U0010fff5"}
_MARK_TESTS = {"\U0010fff0": (str.isdecimal, True), "\U0010fff1": (str.isspace, True), "\U0010fff2": (_is_word, True),
               "\U0010fff3": (str.isdecimal, False), "\U0010fff4": (str.isspace, False),
               "\U0010fff5": (_is_word, False)}
_AT_ESCAPES = frozenset("bBAZzG")
_REFUSED_GROUPS = (("(?=", "assert (a lookahead)"), ("(?!", "assert_not (a negative lookahead)"),
                   ("(?<=", "assert (a lookbehind)"), ("(?<!", "assert_not (a negative lookbehind)"),
                   ("(?>", "an atomic group"), ("(?P=", "a backreference"), ("(?(", "a conditional group"))
_OPEN_COUNT = re.compile(r"\{\d*(?:,\d*)?$")  # the text before a ``}`` that closes a counted repeat
_NOT_SUPPORTED = "which the stop matcher does not support (no backreferences, lookarounds, $, \\b, possessive " \
                 "or atomic groups, inline flags)"


class StopRegexError(ValueError):
    """A pattern that is invalid, too large, or uses a construct the matcher does not support."""


@functools.lru_cache(maxsize=256)
def compile_stop_regex(pattern: str) -> tuple:
    """The matcher program of ``pattern`` (cached by text); raises ``StopRegexError``."""
    if len(pattern) > 4 * MAX_STOP_REGEX_PROGRAM:
        raise StopRegexError(f"is longer than {4 * MAX_STOP_REGEX_PROGRAM} characters")
    marked, dotall = _scan(pattern)
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as e:
        raise StopRegexError(f"is not a valid regular expression: {e}") from None
    try:
        parsed = interegular.parse_pattern(marked)
    except Unsupported as e:
        raise StopRegexError(f"uses {e}, {_NOT_SUPPORTED}") from None
    except (InvalidSyntax, RecursionError, ValueError) as e:
        raise StopRegexError(f"is not a regular expression the stop matcher reads ({type(e).__name__})") from None
    prog: list = []
    emitter = _Emitter(prog, dotall)
    try:
        emitter.node(parsed)
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


def _scan(pattern: str) -> tuple[str, bool]:
    """Refuse the constructs of the module docstring, naming them; return the pattern with ``^``
    (outside classes) marked for interegular, and whether a leading ``(?s)`` asks for DOTALL."""
    if any(ord(c) in _RESERVED for c in pattern):
        raise StopRegexError("holds a code point of U+10FFF0-U+10FFFD, which the stop matcher reserves")
    dotall = pattern.startswith("(?s)")
    text = pattern[4:] if dotall else pattern
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            nxt = text[i + 1:i + 2]
            if nxt in _AT_ESCAPES:
                raise StopRegexError(f"uses \\{nxt} (an at-position assertion), {_NOT_SUPPORTED}")
            if (nxt.isdigit() and nxt != "0") or nxt == "g":
                raise StopRegexError(f"uses a backreference (\\{nxt}), {_NOT_SUPPORTED}")
            out.append(_CLASS_MARKS.get(nxt, text[i:i + 2]))
            i += 2
        elif c == "[":
            end = _class_end(text, i)
            out.append(re.sub(r"\\(.)", lambda m: _CLASS_MARKS.get(m.group(1), m.group(0)), text[i:end], flags=re.S))
            i = end
        elif c == "(" and text.startswith("(?", i):
            _check_group(text, i)
            out.append(c)
            i += 1
        else:
            if c == "$":
                raise StopRegexError(f"uses $ (an at-end assertion), {_NOT_SUPPORTED}")
            if c in "*+?}" and text[i + 1:i + 2] == "+" and (c != "}" or _OPEN_COUNT.search(text, 0, i)):
                raise StopRegexError(f"uses a possessive quantifier ({c}+), {_NOT_SUPPORTED}")
            out.append(_BOL_MARK if c == "^" else c)
            i += 1
    return "".join(out), dotall


def _class_end(text: str, start: int) -> int:
    """The index after the ``]`` closing the class opened at ``start`` (a ``]`` first is a literal)."""
    i = start + 1
    if text[i:i + 1] == "^":
        i += 1
    if text[i:i + 1] == "]":
        i += 1
    while i < len(text) and text[i] != "]":
        i += 2 if text[i] == "\\" else 1
    return min(i + 1, len(text))


def _check_group(text: str, i: int) -> None:
    for opener, what in _REFUSED_GROUPS:
        if text.startswith(opener, i):
            raise StopRegexError(f"uses {what}, {_NOT_SUPPORTED}")
    flags = re.match(r"\(\?([aiLmsux-]+)[:)]", text[i:])
    if flags:
        raise StopRegexError(f"uses the inline flag group (?{flags.group(1)}) (only a leading (?s) is read), "
                             f"{_NOT_SUPPORTED}")


class _Emitter:
    """Appends the instructions of interegular's parse tree to ``prog``, raising once it grows too large."""

    def __init__(self, prog: list, dotall: bool) -> None:
        self.prog, self.dotall = prog, dotall

    def emit(self, op: tuple | None) -> int:
        if len(self.prog) >= MAX_STOP_REGEX_PROGRAM:
            raise StopRegexError(f"is too large for the stop matcher (over {MAX_STOP_REGEX_PROGRAM} states)")
        self.prog.append(op)
        return len(self.prog) - 1

    def node(self, node: object) -> None:
        kind = type(node).__name__
        if kind == "Pattern":  # alternatives, in order
            if node.added_flags or node.removed_flags:
                raise StopRegexError(f"uses an inline flag, {_NOT_SUPPORTED}")
            self.branch(node.options)
        elif kind == "_Concatenation":
            for part in node.parts:
                self.node(part)
        elif kind == "_Repeated":
            self.repeat(node.base, node.min, node.max)
        elif kind == "_CharGroup":
            self.char_group(node.chars, node.negated)
        elif kind == "__DotCls":
            self.emit((_CHAR, (lambda c: True) if self.dotall else "\n".__ne__))
        elif kind == "_NonCapturing":
            raise StopRegexError(f"uses assert (a lookaround), {_NOT_SUPPORTED}")
        elif kind != "__EmptyCls":
            raise StopRegexError(f"uses {kind.strip('_')}, {_NOT_SUPPORTED}")

    def char_group(self, chars: frozenset[str], negated: bool) -> None:
        if chars == {_BOL_MARK} and not negated:
            self.emit((_BOL,))
            return
        tests = [_MARK_TESTS[c] for c in chars if c in _MARK_TESTS]
        plain = chars.difference(_MARK_TESTS)
        if len(tests) == 1 and not plain and not negated and tests[0][1]:  # a bare \d, \s or \w
            self.emit((_CHAR, tests[0][0]))
        elif not tests and len(plain) == 1 and not negated:
            self.emit((_CHAR, next(iter(plain)).__eq__))
        elif not tests:
            self.emit((_CHAR, (lambda c: c not in plain) if negated else plain.__contains__))
        else:
            def test(c: str) -> bool:
                return (c in plain or any(f(c) == want for f, want in tests)) != negated
            self.emit((_CHAR, test))

    def branch(self, alternatives: tuple) -> None:
        jumps = []
        for i, alt in enumerate(alternatives):
            if i < len(alternatives) - 1:
                split = self.emit(None)
                self.node(alt)
                jumps.append(self.emit(None))
                self.prog[split] = (_SPLIT, split + 1, len(self.prog))
            else:
                self.node(alt)
        for j in jumps:
            self.prog[j] = (_JMP, len(self.prog))

    def repeat(self, body: object, lo: int, hi: int | None) -> None:
        if lo > MAX_STOP_REGEX_PROGRAM:  # even an empty body: never loop that long
            raise StopRegexError(f"is too large for the stop matcher (over {MAX_STOP_REGEX_PROGRAM} states)")
        for _ in range(lo):
            self.node(body)
        if hi is None:
            split = self.emit(None)
            self.node(body)
            self.emit((_JMP, split))
            self.prog[split] = (_SPLIT, split + 1, len(self.prog))
            return
        splits = []
        for _ in range(hi - lo):
            splits.append(self.emit(None))
            self.node(body)
        for split in splits:
            self.prog[split] = (_SPLIT, split + 1, len(self.prog))


def _leftmost(start: int | None, pos: int, best: tuple[int, int] | None) -> tuple[int, int] | None:
    """``best`` updated with a match from ``start`` to ``pos`` (leftmost start, then longest)."""
    return (start, pos) if start is not None and (best is None or start <= best[0]) else best


@functools.lru_cache(maxsize=256)
def _exact(pattern: str) -> regex.Pattern:
    return regex.compile(pattern)


class StopRegexMatcher:
    """Finds the earliest match of any of ``patterns`` in text fed to it piece by piece."""

    def __init__(self, patterns: list[str]) -> None:
        self.patterns = list(patterns)
        self.programs = [compile_stop_regex(p) for p in patterns]
        self.pos = 0  # characters fed so far
        self.steps = 0  # thread steps taken (the work done; for tests)
        self.threads = [self._start({}, set(), prog, 0) for prog in self.programs]  # per pattern: pc -> earliest start

    def search(self, text: str) -> tuple[int, str] | None:
        """The earliest match (start, matched text) in ``text``, as ``re.search`` finds it, or
        None. ``text`` is all the output so far and extends the text of the last call: only the
        characters after it are scanned."""
        new = text[self.pos:]
        first = None
        for i, prog in enumerate(self.programs):
            found = self._feed_one(i, prog, new)
            if found is not None:
                exact = self._exact_match(self.patterns[i], text, *found)
                if first is None or exact[0] < first[0]:
                    first = exact
        self.pos = len(text)
        return first

    def _feed_one(self, i: int, prog: tuple, text: str) -> tuple[int, int] | None:
        """Advance pattern ``i``'s threads over ``text``; the leftmost start of a match in the text
        so far, with the longest end seen from it (None: no match yet)."""
        threads, pos, end_pc = self.threads[i], self.pos, len(prog) - 1  # the program ends with _MATCH
        best = _leftmost(threads.get(end_pc), pos, None)
        for c in text:
            # threads are kept in order of start, so a state's first arrival brings its earliest start
            nxt: dict[int, int] = {}
            seen: set[int] = set()
            for pc, start in threads.items():
                op = prog[pc]
                self.steps += 1
                if op[0] == _CHAR and op[1](c) and (best is None or start <= best[0]):
                    self._add(nxt, seen, prog, pc + 1, start, pos + 1)
            pos += 1
            threads = nxt if best is not None else self._start(nxt, seen, prog, pos)
            best = _leftmost(threads.get(end_pc), pos, best)
        self.threads[i] = threads
        return best

    def _exact_match(self, pattern: str, text: str, start: int, end: int) -> tuple[int, str]:
        """The match ``re.search`` finds, which starts at ``start`` (see the module docstring)."""
        try:
            m = _exact(pattern).match(text, start, timeout=EXACT_MATCH_TIMEOUT_S)
        except TimeoutError:
            m = None
        return (start, m.group(0)) if m is not None else (start, text[start:end])

    def _start(self, threads: dict[int, int], seen: set[int], prog: tuple, pos: int) -> dict[int, int]:
        self._add(threads, seen, prog, 0, pos, pos)
        return threads

    def _add(self, threads: dict[int, int], seen: set[int], prog: tuple, pc: int, start: int, pos: int) -> None:
        """Add the thread at ``pc`` and its epsilon closure, skipping states ``seen`` this step."""
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
                threads[pc] = start

    def safe_len(self) -> int:
        """How much of the text can no longer be part of a match: everything before the earliest
        start a live thread holds (or before the text not yet scanned)."""
        starts = [start for threads in self.threads for start in threads.values()]
        return min(starts, default=self.pos)
