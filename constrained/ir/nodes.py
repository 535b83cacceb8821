"""The nodes of the grammar IR (``ir.builder``): immutable and hashable, so equal sub-grammars dedupe.

``Lit`` (literal text), ``Lex`` (a lexeme given as a regex), ``LexOp`` (one lexeme combining
regexes with llguidance's lexeme algebra), ``Seq``, ``Alt``, ``Rep`` (counted repetition) and
``Ref`` (a named rule). Build them with ``ir.builder``'s constructors, which simplify as they go.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Lit:
    """Literal text."""

    text: str


@dataclass(frozen=True)
class Lex:
    """One lexeme: the text of one regex match (Rust ``regex`` syntax, no anchors)."""

    regex: str


@dataclass(frozen=True)
class LexOp:
    """One lexeme built from regexes: ``op`` is ``and`` (``&``: the texts every part matches),
    ``or`` (``|``), ``not`` (``~``, one part: every text the part does not match) or ``seq``
    (concatenation); ``parts`` are regexes (str) or ``LexOp``s. Written out as a Lark terminal of
    its own (llguidance allows ``&``/``~`` only in terminals). ``as_regex``, when set, is one regex
    that matches the same texts: ``Grammar.to_regex`` writes it, and raises without it.
    ``pointer`` (the schema node it came from) is for that error."""

    op: str
    parts: tuple
    pointer: str = field(default="#", compare=False)
    as_regex: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Seq:
    """Concatenation; ``Seq(())`` is the empty text."""

    items: tuple


@dataclass(frozen=True)
class Alt:
    """Alternation of two or more nodes."""

    items: tuple


@dataclass(frozen=True)
class Rep:
    """``item`` repeated ``lo`` to ``hi`` times (``hi`` None: unbounded)."""

    item: Node
    lo: int
    hi: int | None


@dataclass(frozen=True)
class Ref:
    """The rule called ``name`` in the grammar."""

    name: str


Node = Lit | Lex | LexOp | Seq | Alt | Rep | Ref
EMPTY = Seq(())
