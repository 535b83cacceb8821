"""radixlm.constrained: JSON Schema / regex / EBNF / choices / json_object constraints as token bitmasks.

Three nouns: ``TokenizerVocab`` (once per tokenizer), ``CompiledGrammar`` (immutable, cached,
shared) and ``GrammarMatcher`` (a cheap per-request cursor). ``GrammarBackend`` compiles in
worker processes (``compile.pool``); ``jump_forward`` splices forced text. See docs/constrained.md.

Names are imported lazily: a compile worker imports ``radixlm.constrained.compile.worker`` and
must not pay for torch (which ``grammar.py`` needs for the bitmask).
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> module that defines it ("module:attr" where the module's name differs)
_EXPORTS: dict[str, str] = {
    "CompiledGrammar": "radixlm.constrained.grammar",
    "CompileUnavailable": "radixlm.constrained.errors",
    "ConstraintError": "radixlm.constrained.errors",
    "DEFAULT_MAX_MEMORY_MB": "radixlm.constrained.backend",
    "SCHEMA_OPTIONS_KEY": "radixlm.constrained.json_schema.compiler:OPTIONS_KEY",
    "escape_literal": "radixlm.constrained.pattern.regex_text",
    "resolve_ref": "radixlm.constrained.json_schema.normalize:resolve",
    "GrammarBackend": "radixlm.constrained.backend",
    "GrammarMatcher": "radixlm.constrained.grammar",
    "JumpForward": "radixlm.constrained.decoding.jump_forward",
    "TokenizerVocab": "radixlm.constrained.vocab",
    "compile_grammar": "radixlm.constrained.backend",
    "jump_forward": "radixlm.constrained.decoding.jump_forward",
    "schema_to_grammar": "radixlm.constrained.json_schema",
    "warm_up_backend": "radixlm.constrained.backend",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attr = module.partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
