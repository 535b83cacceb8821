"""``--grammar-backend llguidance``: llguidance's own compilers (its JSON-schema and regex front
ends, its GBNF converter) in place of ours, on the same matcher (``grammar.CompiledGrammar``).

Each kind becomes Lark text that hands the constraint to llguidance: ``%json {schema}`` runs
llguidance's JSON-schema compiler (the same one as ``LLMatcher.grammar_from_json_schema``) with
its options under ``x-guidance``, a regex becomes the Lark rule ``grammar_from_regex`` writes, and
choices become Lark string literals. Lenient mode (``strict=False``) is llguidance's ``lenient``
(unsupported keywords ignored, not reported as JSON pointers).
"""

from __future__ import annotations

import json
from typing import Any

import llguidance
from llguidance.gbnf_to_lark import GbnfToLarkError, gbnf_to_lark
from radixlm.constrained.compile.job import require_schema_order
from radixlm.constrained.compile.worker import CompileRequest
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.grammar import CompiledGrammar
from radixlm.constrained.pattern.regex_text import ascii_classes
from radixlm.constrained.vocab import TokenizerVocab


def compile_request(vocab: TokenizerVocab, req: CompileRequest) -> CompiledGrammar:
    """Compile ``req`` with llguidance's front ends (``ConstraintError`` when it refuses)."""
    # llguidance as it ships: no compile-time warm-up (ours, ``warm_start``), so its figures
    # beside ours are its own
    require_schema_order(req, "llguidance")
    return CompiledGrammar(vocab, lark_of(req), req.kind, req.spec,
                           notes=["compiled by llguidance's own front end (--grammar-backend llguidance)"])


def lark_of(req: CompileRequest) -> str:
    """The Lark text that hands ``req`` to llguidance's compiler for its kind."""
    kind, spec = req.kind, req.spec
    if kind in ("json_schema", "json_object"):
        schema = {"type": "object"} if kind == "json_object" else spec
        return "start: %json " + json.dumps(_with_options(schema, req), ensure_ascii=False)
    if kind == "regex":
        if not isinstance(spec, str) or not spec:
            raise ConstraintError("regex must be a non-empty string")
        return json.loads(llguidance.LLMatcher.grammar_from_regex(ascii_classes(spec)))["grammars"][0]["lark_grammar"]
    if kind == "ebnf":
        if not isinstance(spec, str) or not spec.strip():
            raise ConstraintError("ebnf must be a non-empty string (an EBNF or Lark grammar)", keyword="ebnf")
        if "::=" not in spec:
            return spec
        try:
            return gbnf_to_lark(spec).removeprefix("%llguidance {}\n")  # grammar.py writes the header
        except (GbnfToLarkError, ValueError, KeyError, IndexError) as e:
            raise ConstraintError(f"ebnf: {e}", keyword="ebnf") from None
    if kind == "choices":
        if not isinstance(spec, list) or not spec or not all(isinstance(c, str) and c for c in spec):
            raise ConstraintError("choices must be a non-empty list of non-empty strings")
        # A JSON string literal is a Lark string literal (same escapes).
        return "start: " + " | ".join(json.dumps(c, ensure_ascii=False) for c in spec)
    raise ConstraintError(f"unknown constraint kind {kind!r}")


def _with_options(schema: Any, req: CompileRequest) -> Any:
    """``schema`` with llguidance's JSON options: compact separators unless a whitespace pattern
    is given (as our front end), ``lenient`` for ``strict=False``."""
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, dict):
        raise ConstraintError("json_schema must be a JSON object or a boolean")
    options: dict[str, Any] = {"whitespace_flexible": req.whitespace_pattern is not None, "lenient": not req.strict}
    if req.whitespace_pattern is not None:
        options["whitespace_pattern"] = req.whitespace_pattern
    return {**schema, "x-guidance": {**schema.get("x-guidance", {}), **options}}
