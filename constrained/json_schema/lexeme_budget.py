"""Whether llguidance can carry a lexeme of the lexeme algebra (``&``, ``~``) within its budget.

llguidance checks that every lexeme, and every derivative of one as text arrives, can still match
(an emptiness check over the regex algebra, limited by "lexer fuel"). Plain regexes pass at once;
an intersection of many patterns that only long strings satisfy can exhaust the fuel, and the
grammar then fails to build (or a mask fails mid-request). The front end builds each such lexeme
alone, with a share of the engine's fuel, and computes its first two masks, so a lexeme that does
not fit is a ``ConstraintError`` with its schema pointer rather than a failure in the core.
"""

from __future__ import annotations

import functools

from radixlm.constrained.ir import builder as ir

FUEL = 1_000_000  # a quarter of the engine's initial_lexer_fuel (probe.MATCHER_LIMITS), shared by all lexemes
_HEADER = '%llguidance {"no_forcing": true}\n'


@functools.cache
def _byte_tokenizer():
    """An llguidance tokenizer of the 256 bytes (and an end token): masks over it are cheap."""
    from radixlm.constrained.vocab import TokenizerVocab

    return TokenizerVocab.from_token_bytes([bytes([i]) for i in range(256)] + [b"<eos>"], [256]).llg


def check(node: ir.LexOp) -> str:
    """``ok``, ``empty`` (llguidance proved that no string matches ``node``, a JSON string
    lexeme) or ``costly`` (it cannot build ``node`` within ``FUEL``, or compute the masks before
    and after its opening quote)."""
    import llguidance

    limits = llguidance.LLParserLimits(initial_lexer_fuel=FUEL, verbose_errors=False)
    lark = llguidance.LLMatcher.grammar_from_lark(_HEADER + ir.Grammar(node).to_lark())
    matcher = llguidance.LLMatcher(_byte_tokenizer(), lark, log_level=0, limits=limits)
    if matcher.is_error():
        return "costly"
    mask = matcher.compute_bitmask()
    if not mask[0x22 // 8] >> (0x22 % 8) & 1:  # no opening quote (the matcher stops): no string matches
        return "empty" if "NoExtension" in matcher.get_error() or not matcher.is_error() else "costly"
    matcher.consume_token(0x22)
    matcher.compute_bitmask()
    return "costly" if matcher.is_error() else "ok"
