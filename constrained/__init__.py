"""radixlm.constrained: JSON Schema / regex / EBNF / choices / json_object constraints as token bitmasks.

Three nouns: ``TokenizerVocab`` (once per tokenizer), ``CompiledGrammar`` (immutable, cached,
shared) and ``GrammarMatcher`` (a cheap per-request cursor). ``GrammarBackend`` compiles in
worker processes (``compile_pool``); ``jump_forward`` splices forced text. See docs/constrained.md.

Names are imported lazily: a compile worker imports ``radixlm.constrained.compile_worker`` and
must not pay for torch (which ``grammar.py`` needs for the bitmask).
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "CompiledGrammar": "radixlm.constrained.grammar",
    "ConstraintError": "radixlm.constrained.errors",
    "GrammarBackend": "radixlm.constrained.backend",
    "GrammarMatcher": "radixlm.constrained.grammar",
    "JumpForward": "radixlm.constrained.jump_forward",
    "TokenizerVocab": "radixlm.constrained.vocab",
    "compile_grammar": "radixlm.constrained.backend",
    "jump_forward": "radixlm.constrained.jump_forward",
    "schema_to_grammar": "radixlm.constrained.json_schema",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
