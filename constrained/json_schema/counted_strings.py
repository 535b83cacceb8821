"""Strings whose length bounds the matcher counts at runtime instead of the lexer.

A plain string with ``minLength``/``maxLength`` is the lexeme ``"STRING_CHAR{lo,hi}"``
(``scalars.string``). llguidance's lexer gives every count its own state, and near the bound no
token slice fits, so it walks its token trie at every mask inside such a string, at every
request: 0.2-1.5 ms a mask at 152k tokens for ``maxLength`` 8. Where the path automaton
(``unique_paths``) can tell that a value position holds only that string (no other string-valued
lexeme or literal stands there, no key is that lexeme, no ``uniqueItems`` array reads it), the
grammar gets the unbounded lexeme ``"STRING_CHAR*"`` there (one lexer state, the core's token
slices apply) and the matcher counts code points itself (``checks.tracker.UniqueTracker`` counts,
``masks.string_lengths`` masks). Anywhere else the counted lexeme stays, so the bounds hold either
way.
"""

from __future__ import annotations

import re
from typing import Any

from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.lexemes import STRING
from radixlm.constrained.pattern.ecma import STRING_CHAR
from radixlm.constrained.pattern.first_chars import first_chars

STRING_SITE = "s"  # the first half of a string scalar's site in the path automaton's reader
_COUNTED = re.compile(re.escape(f'"{STRING_CHAR}{{') + r"(\d+),(\d*)\}\"")


def counted_bounds(regex: str) -> tuple[int, int | None] | None:
    """``(minLength, maxLength or None)`` of a counted plain-string lexeme, else None."""
    m = _COUNTED.fullmatch(regex)
    if m is None:
        return None
    return int(m.group(1)), (int(m.group(2)) if m.group(2) else None)


def counted_lexemes(grammar: ir.Grammar) -> frozenset[str]:
    """The counted plain-string lexemes (regexes) the grammar holds."""
    found: set[str] = set()
    seen: set[int] = set()
    todo: list[ir.Node] = [grammar.start, *grammar.rules.values()]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, (ir.Seq, ir.Alt)):
            todo.extend(node.items)
        elif isinstance(node, ir.Rep):
            todo.append(node.item)
        elif isinstance(node, ir.Lex) and counted_bounds(node.regex) is not None:
            found.add(node.regex)
    return frozenset(found)


def may_be_string(node: ir.Node) -> bool:
    """Whether a value lexeme or literal can be a JSON string (unsure: True)."""
    if isinstance(node, ir.Lit):
        return node.text.startswith('"')
    if not isinstance(node, ir.Lex):
        return True  # the lexeme algebra builds strings and keys
    found = first_chars(node.regex)
    return found is None or any(lo <= 0x22 <= hi for lo, hi in found[0])


def uncount(grammar: ir.Grammar, regexes: frozenset[str]) -> ir.Grammar:
    """``grammar`` with every lexeme in ``regexes`` replaced by the unbounded plain string (the
    matcher counts those strings: ``UniquePaths.strings``)."""
    if not regexes:
        return grammar
    done: dict[int, ir.Node] = {}
    plain = ir.Lex(STRING)

    def swap(node: ir.Node) -> ir.Node:
        key = id(node)
        if key in done:
            return done[key]
        out = node
        if isinstance(node, ir.Lex) and node.regex in regexes:
            out = plain
        elif isinstance(node, (ir.Seq, ir.Alt)):
            items = tuple(swap(x) for x in node.items)
            out = node if all(a is b for a, b in zip(items, node.items)) else type(node)(items)
        elif isinstance(node, ir.Rep):
            item = swap(node.item)
            out = node if item is node.item else ir.Rep(item, node.lo, node.hi)
        done[key] = out
        return out

    return ir.Grammar(swap(grammar.start), {n: swap(r) for n, r in grammar.rules.items()})


def string_here(group: frozenset, uncounted: set) -> str | None:
    """The counted lexeme that a string opening at this path is (None: none, or not only it: then
    every counted lexeme here goes into ``uncounted``, and the grammar keeps bounding it)."""
    strings = [s[1] for s in group if s[0] == STRING_SITE]
    if len(strings) == 1 and strings[0] is not None:
        return strings[0]
    uncounted.update(r for r in strings if r is not None)
    return None


def read_whole(reader: Any, arrays: list) -> set[str]:
    """The counted lexemes at or below the items of runtime-checked unique arrays, whose bytes
    the tracker reads without paths (``array_run``)."""
    out: set[str] = set()
    todo = [t for s in arrays for t in reader.edges[s].get("*", ())]
    seen: set = set()
    while todo:
        site = todo.pop()
        if site in seen:
            continue
        seen.add(site)
        if site[0] == STRING_SITE:
            if site[1] is not None:
                out.add(site[1])
            continue
        for targets in reader.edges[site].values():
            todo.extend(targets)
    return out
