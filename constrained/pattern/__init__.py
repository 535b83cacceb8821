"""Regexes of JSON scalar values for the JSON-schema front end (``radixlm.constrained.json_schema``).

Every regex is written over the JSON-encoded string body (or the number's text) and is sound: a
string it matches validates. One concept per module:

- ``ecma``: an ECMA-262 ``pattern`` (search semantics) -> token tree -> regex.
- ``chars``: character classes of a parsed pattern, as code points and as encoded regexes.
- ``bounds`` / ``measure``: narrowing a pattern to ``minLength``/``maxLength``, and the sizes
  (shortest/longest match, automaton states) that narrowing measures.
- ``samples``: the first characters a regex can match (for disjointness proofs).
- ``formats``: regexes of the supported ``format`` values.
- ``numbers``: integer and decimal ranges; ``numbers``: ``multipleOf``.

Nothing is imported here: modules are imported by their own names.
"""
