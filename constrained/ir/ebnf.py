"""EBNF grammars as SGLang accepts them: GBNF/xgrammar style (``root ::= ...``) or Lark.

Both become Lark text for the matcher core: GBNF through llguidance's converter (``root`` is the
start rule), Lark as it is (its ``start`` rule). The grammar is checked here, so a bad grammar is
a ``ConstraintError`` with the parser's message and position, never a matcher in an error state.
"""

from __future__ import annotations

import llguidance
from llguidance.gbnf_to_lark import GbnfToLarkError, gbnf_to_lark
from radixlm.constrained.errors import ConstraintError

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
    return lark
