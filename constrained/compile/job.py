"""One compile, without torch: a constraint of any kind -> grammar (the front ends) -> Lark text
-> the matcher probe.

One compile, without torch: constraint -> grammar (the front ends) -> Lark text -> the
matcher probe.

This is the work a compile worker process runs (``compile.worker``); it imports no torch, so a
worker starts in a fraction of a second. The probe (``compile/worker.py``) builds llguidance's
matcher once here, under the worker's budgets, and reports its size; ``CompiledGrammar`` then
builds it again in the engine's process, for grammars the probe found within bounds (llguidance's
objects do not pickle).

EBNF: EBNF grammars as SGLang accepts them: GBNF/xgrammar style (``root ::= ...``) or Lark.

Both become Lark text for the matcher core: GBNF through llguidance's converter (``root`` is the
start rule), Lark as it is (its ``start`` rule). The grammar is checked here, so a bad grammar is
a ``ConstraintError`` with the parser's message and position, never a matcher in an error state.

A grammar whose start rule derives no finite string (``root ::= root``, ``root ::= "a" root``) is
valid to the parser but would let the model write nothing: :func:`empty_rules` finds the rules that
never end (the fixpoint of "some alternative is made of ending items only") on the Lark text, and
such a grammar is refused naming them. Lark syntax this reader does not know skips the check.
"""

from __future__ import annotations

import re

import llguidance
from llguidance.gbnf_to_lark import GbnfToLarkError, gbnf_to_lark
from radixlm.constrained.compile.worker import (
    KEY_ORDERS,
    CompiledParts,
    CompileRequest,
    ProbeVocab,
    probe_matcher,
)
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema.compiler import json_object_grammar, schema_to_grammar
from radixlm.constrained.pattern.ecma import warm_up as _warm_pattern_classes
from radixlm.constrained.pattern.regex_text import ascii_classes
from radixlm.constrained.vocab import TokenizerVocab

KINDS = ("json_schema", "regex", "ebnf", "choices", "json_object")


def require_schema_order(req: CompileRequest, backend: str) -> None:
    """Raise ``ConstraintError`` for an any-order JSON schema request on a backend that only
    generates members in schema order (llguidance, xgrammar)."""
    if req.kind == "json_schema" and req.key_order != "schema":
        raise ConstraintError(f"json_key_order {req.key_order!r} is supported by the radixlm grammar backend "
                              f"only; --grammar-backend {backend} generates members in schema order")


def constraint_grammar(req: CompileRequest) -> CompiledParts:
    """The Lark grammar of a constraint. ``kind`` is ``json_schema`` (a dict or bool), ``regex``
    (a string, full match), ``ebnf`` (an EBNF/GBNF or Lark grammar string), ``choices`` (a list
    of strings, matched literally) or ``json_object`` (``spec`` ignored); ``key_order`` picks how
    a schema's object members are generated (``KEY_ORDERS``)."""
    kind, spec, ws = req.kind, req.spec, req.whitespace_pattern
    if kind == "json_schema":
        if req.key_order not in KEY_ORDERS:
            raise ConstraintError(f"json_key_order must be one of {', '.join(KEY_ORDERS)}, got {req.key_order!r}")
        any_order = req.key_order == "any"
        out = schema_to_grammar(spec, ws, req.strict, any_order=any_order, unspecified_extras=any_order,
                                unique_runtime=True)
        return CompiledParts(out.lark, out.relaxed, unique=out.unique)
    if kind == "regex":
        if not isinstance(spec, str) or not spec:
            raise ConstraintError("regex must be a non-empty string")
        return CompiledParts(ir.Grammar(ir.Lex(ascii_classes(spec))).to_lark())
    if kind == "ebnf":
        return CompiledParts(ebnf_to_lark(spec))
    if kind == "choices":
        if not isinstance(spec, list) or not spec or not all(isinstance(c, str) and c for c in spec):
            raise ConstraintError("choices must be a non-empty list of non-empty strings")
        return CompiledParts(ir.Grammar(ir.alt([ir.Lit(c) for c in spec])).to_lark())
    if kind == "json_object":
        return CompiledParts(json_object_grammar(ws or "").to_lark())
    raise ConstraintError(f"unknown constraint kind {kind!r} (expected one of {', '.join(KINDS)})")


def compile_parts(vocab: TokenizerVocab | ProbeVocab, req: CompileRequest) -> CompiledParts:
    """The whole worker-side compile (what a worker runs for each job): the grammar text, then its
    matcher built and walked once against ``vocab`` (``compile/worker.py``), inside the worker's
    budgets, with the memory that took."""
    parts = constraint_grammar(req)
    parts.matcher_bytes = probe_matcher(vocab, parts.lark, req.kind)
    return parts


def prepare(vocab: TokenizerVocab) -> ProbeVocab:
    """A worker's one-time set-up with the vocabulary (``compile.worker``, before its memory cap):
    llguidance's tokenizer, which every probe uses, without token slices (they speed up masks
    inside JSON strings and cost ~35 MB at 152k tokens; a probe computes one or two masks) and
    with the byte encoder (the probe walks forced text by single-byte tokens itself). Returns what
    the jobs read, so the worker drops the token table (~8 MB at 152k tokens)."""
    vocab.prepare_llg(slices=[], byte_encoder=True)
    return ProbeVocab(vocab.llg, vocab.byte_tokens)


def warm_up() -> None:
    """The front end's one-time tables, built when a compile worker starts (``compile.worker``)."""
    _warm_pattern_classes()


MAX_EBNF_CHARS = 1_000_000


def ebnf_to_lark(spec: object) -> str:
    """The Lark text of an EBNF/GBNF or Lark grammar (``ConstraintError`` when it is invalid)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConstraintError("ebnf must be a non-empty string (an EBNF or Lark grammar)", keyword="ebnf")
    if len(spec) > MAX_EBNF_CHARS:
        raise ConstraintError(f"ebnf grammar is longer than {MAX_EBNF_CHARS} characters", keyword="ebnf")
    if "::=" in spec:
        try:
            lark = gbnf_to_lark(spec).removeprefix("%llguidance {}\n")
        except (GbnfToLarkError, ValueError, KeyError, IndexError) as e:
            raise ConstraintError(f"ebnf: {e}", keyword="ebnf") from None
    else:
        lark = spec
    error = llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(lark))
    if error and not error.startswith("WARNING"):
        raise ConstraintError(f"ebnf: {error.strip().splitlines()[0]}", keyword="ebnf")
    empty = empty_rules(lark)
    if empty and "start" in empty:
        names = ", ".join(("root" if "::=" in spec else "start") if n == "start" else n for n in empty)
        raise ConstraintError(f"ebnf: the grammar matches no finite string: rule(s) {names} never end (every "
                              "alternative refers back to a rule that never ends; add an alternative "
                              "without the recursion)", keyword="ebnf")
    return lark


_TOKEN = re.compile(r'\s+|//[^\n]*|"(?:\\.|[^"\\])*"i?|/(?:\\.|[^/\\\n])+/[a-z]*|[A-Za-z_][\w.]*|->|\.\.|\d+|[:|()\[\]{}?*+~,]')
_OPTIONAL = frozenset("?*")


class _Unknown(Exception):
    """Lark syntax the productivity reader does not handle."""


def empty_rules(lark: str) -> list[str]:
    """The rules of the Lark grammar ``lark`` that derive no finite string (empty when every rule
    ends, or when the text uses syntax this reader does not know)."""
    try:
        rules = _read_rules(lark)
    except _Unknown:
        return []
    ending: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, alternatives in rules.items():
            if name not in ending and any(all(_ends(item, ending, rules) for item in alt) for alt in alternatives):
                ending.add(name)
                changed = True
    return [name for name in rules if name not in ending]


def _ends(item: object, ending: set[str], rules: dict) -> bool:
    if isinstance(item, str):  # a rule or terminal name
        return item in ending or item not in rules
    return any(all(_ends(i, ending, rules) for i in alt) for alt in item)  # a group: its alternatives


def _read_rules(lark: str) -> dict[str, list[list[object]]]:
    """name -> alternatives, each a list of items: a name, or a group (a list of alternatives);
    literals, regexes and optional items are dropped (they always end)."""
    rules: dict[str, list[list[object]]] = {}
    for line in re.split(r"\n(?=[A-Za-z_?!])", lark.strip()):
        if not line.strip() or line.lstrip().startswith(("%", "//")):
            continue
        head, sep, body = line.partition(":")
        name = head.strip().lstrip("?!").split(".")[0]
        if not sep or not re.fullmatch(r"\w+", name):
            raise _Unknown
        tokens = [t for t in _tokens(body) if t.strip() and not t.startswith("//")]
        alternatives, rest = _alternatives(tokens)
        if rest:
            raise _Unknown
        rules[name] = rules.get(name, []) + alternatives
    return rules


def _tokens(body: str) -> list[str]:
    """``body`` cut into tokens, every character covered (``_Unknown`` at one no token matches)."""
    tokens, pos = [], 0
    while pos < len(body):
        match = _TOKEN.match(body, pos)
        if match is None:
            raise _Unknown
        tokens.append(match.group())
        pos = match.end()
    return tokens


def _alternatives(tokens: list[str]) -> tuple[list[list[object]], list[str]]:
    """Parse ``alt ("|" alt)*`` from ``tokens``; returns it and the tokens after it."""
    alternatives: list[list[object]] = [[]]
    while tokens and tokens[0] not in (")", "]"):
        token, tokens = tokens[0], tokens[1:]
        if token == "|":
            alternatives.append([])
            continue
        if token == "->":  # an alias names the alternative: its name is no item
            tokens = tokens[1:]
            continue
        if token in ("(", "["):
            inner, tokens = _alternatives(tokens)
            if not tokens or tokens[0] != {"(": ")", "[": "]"}[token]:
                raise _Unknown
            tokens = tokens[1:]
            item: object = None if token == "[" else inner
        elif token[0] in "\"/" or token.isdigit():
            item = None
        elif re.fullmatch(r"[A-Za-z_][\w.]*", token):
            item = token
        else:
            raise _Unknown
        if tokens and tokens[0] == "{":  # {n}, {n,m}, {n,}: optional when n is 0
            close = tokens.index("}") if "}" in tokens else -1
            if close < 2 or not tokens[1].isdigit():
                raise _Unknown
            item = None if tokens[1] == "0" else item
            tokens = tokens[close + 1:]
        elif tokens and tokens[0] in _OPTIONAL:
            item, tokens = None, tokens[1:]
        elif tokens and tokens[0] == "+":
            tokens = tokens[1:]
        elif tokens and tokens[0] == "~":
            count = tokens[1] if len(tokens) > 1 else ""
            if not count.isdigit():
                raise _Unknown
            item = None if count == "0" else item
            tokens = tokens[2:]
            if tokens[:1] == [".."]:
                tokens = tokens[2:]
        if item is not None:
            alternatives[-1].append(item)
    return alternatives, tokens
