"""The lexemes (regexes) of unconstrained JSON scalars: what ``any_value`` and the unconstrained
cases of ``scalars`` emit."""

from __future__ import annotations

from radixlm.constrained.pattern.ecma import STRING_CHAR
from radixlm.constrained.pattern.int_range import number_range_regex

NULL = "null"
BOOLEAN = "(true|false)"
NUMBER = number_range_regex(None, False, None, False)
STRING = f'"{STRING_CHAR}*"'
