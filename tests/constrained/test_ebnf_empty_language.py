"""An EBNF grammar whose start rule derives no finite string is refused naming its rules
(``constrained/compile/job.py``'s ``empty_rules``), and every grammar that ends is accepted."""

from __future__ import annotations

import pytest
from radixlm.constrained.compile.job import ebnf_to_lark, empty_rules
from radixlm.constrained.errors import ConstraintError

pytestmark = pytest.mark.unit

EMPTY = {
    "root ::= root": "root",
    'root ::= "a" root': "root",
    'root ::= x\nx ::= x "a"': "root, x",
    "start: start": "start",
    'start: "(" start ")" | start start': "start",
    'root ::= x{1,3}\nx ::= "b" x': "root, x",
}
ENDING = [
    'root ::= "a" | root', 'root ::= [a-z]+ ("," root)?', 'start: "a" | "(" start ")"',
    'root ::= x{2}\nx ::= "b"', 'root ::= x{0,3}\nx ::= x', 'root ::= "a" | "b"\nunused ::= unused',
    'root ::= ws ("x" ws)*\nws ::= | " " | "\\n" [ \\t]{0,20}',
]


@pytest.mark.parametrize("grammar", sorted(EMPTY))
def test_a_grammar_that_never_ends_is_refused_naming_its_rules(grammar):
    with pytest.raises(ConstraintError) as info:
        ebnf_to_lark(grammar)
    assert f"matches no finite string: rule(s) {EMPTY[grammar]} never end" in str(info.value)


@pytest.mark.parametrize("grammar", ENDING)
def test_a_grammar_that_ends_is_accepted(grammar):
    lark = ebnf_to_lark(grammar)
    assert "start" not in empty_rules(lark)


def test_syntax_the_reader_does_not_know_skips_the_check():
    assert empty_rules('start: %json {"type": "object"}') == []
