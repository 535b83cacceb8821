"""The JSON-schema front end: a schema -> a context-free grammar (``ir.builder``) of its
serialisations, sound (every derived text validates), our own code for drafts 4 .. 2020-12.

``compiler`` walks the schema (``$ref``, ``allOf``, ``anyOf``/``oneOf``, recursion rules); the
keyword modules see the walk through a ``context.Context``: ``normalize`` (keyword clean-up,
``merge``), ``refs``, ``normalize`` (types to generate), ``typed`` -> ``scalars`` / ``arrays`` /
``objects`` (+ ``names`` for ``propertyNames``), ``combinators`` (``not``), ``combinators``, ``switch``
(``if``/``then``/``else`` on a discriminator) and ``disjoint`` (the proofs ``oneOf``, ``not`` and
``maxContains`` need). Scalar regexes come from ``radixlm.constrained.pattern``.
"""

from radixlm.constrained.json_schema.compiler import (
    SchemaGrammar,
    any_json_grammar,
    json_object_grammar,
    schema_to_grammar,
)

__all__ = ["SchemaGrammar", "any_json_grammar", "json_object_grammar", "schema_to_grammar"]
