"""One compile, without torch: constraint -> regex (the front end) -> outlines-core ``Index``.

This is the work a compile worker process runs (``compile_worker``); it imports neither torch
nor ``grammar.py``, so a worker starts in a fraction of a second. ``CompiledGrammar`` wraps the
resulting parts in the engine's process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import outlines_core
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.json_schema import DEFAULT_MAX_REF_DEPTH, any_json_regex, schema_to_regex
from radixlm.constrained.pattern_chars import escape_literal
from radixlm.constrained.vocab import TokenizerVocab

JSON_OBJECT_DEPTH = 2  # the object plus one container level inside it: {"a": [1], "b": {"c": 2}}


@dataclass(frozen=True)
class CompileRequest:
    """What to compile (picklable: it travels to a worker process)."""

    kind: str
    spec: Any
    whitespace_pattern: str | None = None
    strict: bool = True
    max_ref_depth: int = DEFAULT_MAX_REF_DEPTH
    max_regex_chars: int | None = None

    def cache_key(self) -> str:
        """Equal for constraints that compile to the same grammar."""
        return json.dumps([self.kind, self.spec, self.whitespace_pattern, self.strict],
                          sort_keys=True, ensure_ascii=False)


@dataclass
class CompiledParts:
    """A compile's result: the regex, what was relaxed/restricted, and the built ``Index``
    (outlines-core indexes pickle through their binary form, so this crosses processes)."""

    regex: str
    relaxed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    index: Any = None


def constraint_regex(req: CompileRequest) -> CompiledParts:
    """The regex of a constraint (no index yet). ``kind`` is ``json_schema`` (a dict or bool),
    ``regex`` (a string), ``choices`` (a list of strings, matched literally) or ``json_object``."""
    kind, spec, ws = req.kind, req.spec, req.whitespace_pattern
    if kind == "json_schema":
        out = schema_to_regex(spec, ws, req.strict, req.max_ref_depth, max_regex_chars=req.max_regex_chars)
        notes = []
        if out.max_ref_depth is not None and out.max_ref_depth < req.max_ref_depth:
            notes.append(f"schema too large for one automaton: recursive $refs expand at most "
                         f"{out.max_ref_depth} times")
        if out.optional_depth is not None:
            notes.append(f"schema too large for one automaton: objects nested deeper than "
                         f"{out.optional_depth} levels generate only their required members")
        return CompiledParts(out.regex, out.relaxed, notes)
    if kind == "regex":
        if not isinstance(spec, str) or not spec:
            raise ConstraintError("regex must be a non-empty string")
        return CompiledParts(spec)
    if kind == "choices":
        if not isinstance(spec, list) or not spec or not all(isinstance(c, str) and c for c in spec):
            raise ConstraintError("choices must be a non-empty list of non-empty strings")
        # Longest first: outlines-core alternations are leftmost-first ("a" would shadow "ab").
        ordered = sorted(dict.fromkeys(spec), key=len, reverse=True)
        return CompiledParts("(" + "|".join(escape_literal(c) for c in ordered) + ")")
    if kind == "json_object":
        wsg = f"({ws})" if ws else ""
        inner = any_json_regex(JSON_OBJECT_DEPTH - 1, ws or "")
        member = rf'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{{4}})*"{wsg}:{wsg}{inner}'
        return CompiledParts(rf"\{{{wsg}({member}({wsg},{wsg}{member})*)?{wsg}\}}")
    raise ConstraintError(f"unknown constraint kind {kind!r}")


def build_index(regex: str, vocab: TokenizerVocab, kind: str) -> Any:
    """The outlines-core ``Index`` of ``regex`` over ``vocab`` (the expensive, native step).

    outlines-core stops exploring once a match is complete (``a(bb)?`` loses "abb"), so the regex
    ends in a NUL sentinel that the vocabulary spells as EOS: a state is accepting iff EOS (the
    sentinel) may follow, and nothing is cut short.
    """
    try:
        return outlines_core.Index(f"({regex})\\x00", vocab.outlines)
    except (ValueError, RuntimeError) as e:
        raise ConstraintError(f"{kind}: cannot compile regex: {str(e)[:300]}") from None


def compile_parts(vocab: TokenizerVocab, req: CompileRequest) -> CompiledParts:
    """The whole compile: regex, then index (what a worker runs for each job)."""
    parts = constraint_regex(req)
    parts.index = build_index(parts.regex, vocab, req.kind)
    return parts
