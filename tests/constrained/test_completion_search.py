"""The completion search (``constrained/completion.py``): it finishes large objects that take extra
members by writing the schema's required keys first, ends numbers, and ``BudgetClose`` does not
repeat a failing search at every step (it runs in the scheduler's loop)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from radixlm.constrained import compile_grammar
from radixlm.constrained.decoding.completion import completion_hints, schema_keys
from radixlm.runtime.engine.constraints import BudgetClose

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

# 40 optional string members per object, then the one the object needs: extras are allowed
# (no additionalProperties), so every literal key of the grammar is accepted as a member anywhere.
_FILLER = {f"option_number_{i}": {"type": "string"} for i in range(40)}
LARGE = {
    "type": "object",
    "properties": {
        "settings": {"type": "object", "properties": {**_FILLER, "needed": {"type": "integer"}},
                     "required": ["needed"]},
        "items": {"type": "array", "minItems": 1,
                  "items": {"$ref": "#/$defs/item"}},
    },
    "required": ["settings", "items"],
    "$defs": {"item": {"anyOf": [{"type": "object", "properties": {"id": {"type": "integer"}},
                                  "required": ["id"]}]}},
}


def _complete_after(grammar, text: str) -> bytes:
    matcher = grammar.matcher()
    for b in text.encode():
        assert matcher.accept_token(grammar.vocab.byte_tokens[b]), text
    data = matcher.completion_bytes()
    assert data is not None, text
    return data


def _completed(vocab, schema: dict, prefix: str) -> tuple[dict, bytes]:
    """The document ``prefix`` plus its completion (validated against ``schema``), and the completion."""
    data = _complete_after(compile_grammar(vocab, "json_schema", schema, key_order="any"), prefix)  # extras
    doc = json.loads(prefix + data.decode())
    jsonschema.validate(doc, schema)
    return doc, data


@pytest.mark.parametrize("prefix", ['{"', '{"settings":{"', '{"settings":{"option_number_3":"x","zz', '{"s":1,"'])
def test_an_object_with_extras_gets_its_required_keys_first(vocab, prefix):
    _, data = _completed(vocab, LARGE, prefix)
    # without the schema's keys first, the search spells the 40 filler keys before "needed"
    assert len(data) < 120, data


# schema order: only the next named key (or an extra one) may come, while "required" lists a
# later key first; the search must not spell that one, which can only end as an extra key
ORDERED = {"type": "object", "x-radixlm": {"property_order": "schema"},
           "properties": {"end_date": {"type": "string"}, "platform": {"type": "string"},
                          "topic": {"type": "string"}},
           "required": ["topic", "platform", "end_date"]}


@pytest.mark.parametrize("prefix", ['{"', '{"zzz', '{"zzz":"a","', '{"end_date":"x","t'])
def test_schema_order_spells_only_a_key_that_may_come_now(vocab, prefix):
    doc, _ = _completed(vocab, ORDERED, prefix)
    assert [k for k in doc if k in ORDERED["properties"]] == ["end_date", "platform", "topic"], doc


def test_keys_through_refs_and_array_items(vocab):
    grammar = compile_grammar(vocab, "json_schema", LARGE, key_order="any")  # "items" before "settings"
    data = _complete_after(grammar, '{"items":[{"id":1},{"')
    assert data.startswith(b'id"'), data
    jsonschema.validate(json.loads('{"items":[{"id":1},{"' + data.decode()), LARGE)


def test_schema_keys_lookup(vocab):
    grammar = compile_grammar(vocab, "json_schema", LARGE)
    assert schema_keys(grammar, ()) == [b'"settings"', b'"items"']
    assert schema_keys(grammar, ("settings",))[0] == b'"needed"'
    assert schema_keys(grammar, ("items", 3)) == [b'"id"']
    assert schema_keys(grammar, ("nowhere",)) == []
    assert schema_keys(compile_grammar(vocab, "regex", "[a-z]+"), ()) == []


def test_a_number_is_ended_rather_than_grown(vocab):
    # many integer members: the search passes its stall length, and a reordered candidate list
    # once put digits before "," and wrote one number for ever
    schema = {"type": "object", "properties": {f"n{i}": {"type": "integer"} for i in range(30)},
              "required": [f"n{i}" for i in range(30)], "additionalProperties": False}
    grammar = compile_grammar(vocab, "json_schema", schema)
    data = _complete_after(grammar, '{"n0":12')
    doc = json.loads('{"n0":12' + data.decode())
    jsonschema.validate(doc, schema)
    assert all(len(str(v)) <= 3 for v in doc.values()), doc


class _NoCompletion:
    """A matcher whose completion search never finds anything (and counts the searches)."""

    def __init__(self) -> None:
        self.searches = 0

    def is_accepting(self) -> bool:
        return False

    def completion_bytes(self, max_bytes: int) -> None:
        self.searches += 1
        return None


def test_a_failing_search_is_retried_only_when_the_budget_halves():
    matcher = _NoCompletion()
    close = BudgetClose(matcher, tokenizer=None)
    for room in range(1000, 0, -1):
        assert close.splice(room) is None
    # at rooms 1000, 500, 250, 125, 62, 31, 15, 7, 3, 1: ten searches in 1,000 steps, not 1,000
    assert matcher.searches == 10
    assert "no completion was found" in close.note


def test_a_pattern_with_a_literal_start_is_spelled_from_its_sample(vocab):
    # "iglu:" is forced; the pattern's sample (iglu:a/a/1-0) is spelled on after it, where the
    # plain candidate order would need ":" and "/" at the right places by chance
    schema = {"type": "object", "additionalProperties": False, "required": ["schema"],
              "properties": {"schema": {"type": "string", "pattern": "^iglu:[a-z.]+/[a-z]+/[1-9][0-9]*-0$"}}}
    grammar = compile_grammar(vocab, "json_schema", schema)
    for prefix in ('{"schema":"', '{"schema":"iglu:com.x'):
        data = _complete_after(grammar, prefix)
        jsonschema.validate(json.loads(prefix + data.decode()), schema)
        assert len(data) < 40, data
    # right after the forced "iglu:" the sample goes on from its own "iglu:", not from its start
    assert _complete_after(grammar, '{"schema":"').startswith(b"iglu:a/"), completion_hints(grammar)


def test_literals_are_looked_up_by_prefix_in_their_order(vocab):
    """``literals_starting_with``: the grammar's literals that start with an open key, in the
    order the grammar spells them (the search tries them in turn), whatever their sort order."""
    from radixlm.constrained.decoding.completion import literals_starting_with, string_literals

    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in ["zeta", "alpha", "zed", "al", "beta"]}}
    grammar = compile_grammar(vocab, "json_schema", schema)
    literals = string_literals(grammar)
    assert literals_starting_with(grammar, b'"z') == [k for k in literals if k.startswith(b'"z')]
    assert [k for k in literals_starting_with(grammar, b'"') if k in (b'"zeta"', b'"alpha"')] == \
        [k for k in literals if k in (b'"zeta"', b'"alpha"')]
    assert literals_starting_with(grammar, b'"al') == [k for k in literals if k.startswith(b'"al')]
    assert literals_starting_with(grammar, b'"q') == []
