"""radixlm.constrained: JSON Schema / regex / choices / json_object constraints as token bitmasks.

Three nouns: ``TokenizerVocab`` (once per tokenizer), ``CompiledGrammar`` (immutable, cached,
shared) and ``GrammarMatcher`` (a cheap per-request cursor). ``GrammarBackend`` compiles off the
hot path; ``jump_forward`` splices forced text. See docs/constrained.md.
"""

from radixlm.constrained.backend import GrammarBackend, compile_grammar
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.grammar import CompiledGrammar, GrammarMatcher
from radixlm.constrained.json_schema import schema_to_regex
from radixlm.constrained.jump_forward import JumpForward, jump_forward
from radixlm.constrained.vocab import TokenizerVocab

__all__ = [
    "CompiledGrammar", "ConstraintError", "GrammarBackend", "GrammarMatcher", "JumpForward",
    "TokenizerVocab", "compile_grammar", "jump_forward", "schema_to_regex",
]
