"""Regexes of JSON scalar values for the JSON-schema front end (``radixlm.constrained.json_schema``).

Every regex is written over the JSON-encoded string body (or the number's text) and is sound: a
string it matches validates. One concept per module:

- ``ecma``: an ECMA-262 ``pattern`` (search semantics) -> token tree -> regex, and the character
  classes of a parsed pattern, as code points and as encoded regexes.
- ``bounds``: narrowing a pattern to ``minLength``/``maxLength``, the sizes (shortest/longest
  match, automaton states) that narrowing measures, and exact regexes over the canonical encoding.
- ``samples``: short strings a pattern matches, and the first characters a regex can match (for
  disjointness proofs).
- ``formats``: regexes of the supported ``format`` values.
- ``numbers``: integer and decimal ranges, and ``multipleOf``.
- ``regex_text``: a literal escaped, and a ``regex`` constraint's ``\\d``/``\\w`` as ASCII classes.

Nothing is imported here: modules are imported by their own names.
"""
