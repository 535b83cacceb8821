"""The JSON-schema front end: a schema -> a context-free grammar (``ir.builder``) of its
serialisations, sound (every derived text validates), our own code for drafts 4 .. 2020-12.

``compiler`` walks the schema (``$ref``, ``allOf``, ``anyOf``/``oneOf``, recursion rules, the type
dispatch); the keyword modules see the walk through a ``normalize.Context``: ``normalize`` (the
canonical node: keyword clean-up, ``merge``, ``$ref`` resolution, type inference), ``scalars``,
``arrays``, ``objects``, ``names`` (``propertyNames``, extra keys), ``combinators`` (``not``,
``oneOf``, ``if``/``then``/``else`` on a discriminator), ``disjoint`` (the proofs ``oneOf``, ``not``
and ``maxContains`` need) and ``unique`` (where the matcher's runtime checks apply, read off the
finished grammar). Scalar regexes come from ``radixlm.constrained.pattern``.
"""

from radixlm.constrained.json_schema.compiler import (
    SchemaGrammar,
    any_json_grammar,
    json_object_grammar,
    schema_to_grammar,
)

__all__ = ["SchemaGrammar", "any_json_grammar", "json_object_grammar", "schema_to_grammar"]
