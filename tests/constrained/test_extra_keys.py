"""Keys of extra members (``json_schema/names.py``): a JSON string of plain characters
that is no named key, written as the lexeme algebra (``plain & ~names``) whatever the number of
names, with an equivalent trie regex kept beside it while the names are small, so that
``Grammar.to_regex`` still works there and refuses with a pointer past it."""

from __future__ import annotations

import itertools
import json
import re

import pytest
import test_unique_items as shared
from radixlm.constrained import ConstraintError, compile_grammar
from radixlm.constrained.ir import builder as ir
from radixlm.constrained.json_schema import schema_to_grammar
from radixlm.constrained.json_schema.names import complement_key

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

tiny_vocab = shared.tiny_vocab

SMALL = {"type": "object", "properties": {"ab": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
LARGE = {"type": "object", "properties": {f"name_{i:02d}": {"type": "integer"} for i in range(12)},
         "additionalProperties": {"type": "string"}}
LONG = {"type": "object", "properties": {"x" * 49: {"type": "integer"}}, "additionalProperties": {"type": "string"}}


def _strings():
    """Every string of up to 3 characters over a small alphabet (the names' prefixes, extensions
    and neighbours among them)."""
    for n in range(4):
        for chars in itertools.product("ab_", repeat=n):
            yield "".join(chars)


@pytest.mark.parametrize("nonempty", [False, True])
def test_small_name_sets_keep_an_equivalent_regex(nonempty):
    names = {"ab", "b", "a_"}
    key = complement_key(names, nonempty)
    assert isinstance(key, ir.LexOp) and key.op == "and" and key.as_regex is not None
    for s in _strings():
        want = s not in names and (len(s) > 0 or not nonempty)
        assert bool(re.fullmatch(key.as_regex, json.dumps(s))) == want, s


def test_large_name_sets_have_no_regex_and_no_plain_words_need_no_algebra():
    key = complement_key({f"name_{i:02d}" for i in range(12)}, nonempty=False)
    assert isinstance(key, ir.LexOp) and key.as_regex is None
    assert isinstance(complement_key({'a"b', "\n"}, nonempty=True), ir.Lex)  # no plain key to exclude


def test_lark_writes_the_algebra_and_to_regex_follows_the_size():
    small = schema_to_grammar(SMALL)
    assert " & " in small.lark and "~" in small.lark
    rx = small.grammar.to_regex()
    for text, ok in [('{"ab":1}', True), ('{"ab":"x"}', False), ('{"a":"x"}', True), ('{"abc":"x"}', True),
                     ('{"":"x","ab":2}', True), ('{"b":"x","ab":"y"}', False)]:
        assert bool(re.fullmatch(rx, text)) == ok, text
    with pytest.raises(ConstraintError, match="one regex") as info:
        schema_to_grammar(LONG).grammar.to_regex()
    assert info.value.pointer == "#/additionalProperties"


@pytest.mark.parametrize("schema", [SMALL, LARGE, LONG])
def test_the_matcher_excludes_exactly_the_named_keys(tiny_vocab, schema):
    grammar = compile_grammar(tiny_vocab, "json_schema", schema)
    named = sorted(schema["properties"])
    for name in named:
        assert grammar.matches(json.dumps({name: 1}, separators=(",", ":")))
        assert not grammar.matches(json.dumps({name: "x"}, separators=(",", ":")))
    for extra in ["", "a", named[0][:-1], named[0] + "x", "name_99"]:
        assert grammar.matches(json.dumps({extra: "x"}, separators=(",", ":"))), extra


def test_strings_excluded_by_not_enum_are_the_same_algebra():
    """``not {enum}`` over plain strings excludes its words the same way (one lexeme, the regex
    form kept while small)."""
    out = schema_to_grammar({"type": "string", "not": {"enum": ["internal", "private"]}})
    assert " & " in out.lark and "~" in out.lark
    rx = out.grammar.to_regex()
    for s, ok in [("internal", False), ("private", False), ("", True), ("intern", True), ("internals", True)]:
        assert bool(re.fullmatch(rx, json.dumps(s))) == ok, s
