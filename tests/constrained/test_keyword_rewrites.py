"""Schema keywords handled by rewriting: ``propertyNames``, ``oneOf`` branch selection,
``if``/``then``/``else`` (tagged unions, enums, impossible ``then``s), large ``anyOf`` products
and ``uniqueItems`` over enums (exact, one rule per set of unused values).
Each case checks instances both ways and that random token walks validate."""

from __future__ import annotations

import itertools
import json

import jsonschema
import pytest
from radixlm.constrained import ConstraintError, compile_grammar, schema_to_grammar

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

# (schema, instances that must be accepted, instances that must be rejected)
CASES = [
    ({"type": "object", "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": {"type": "integer"}},
     [{}, {"a": 1}, {"a": 1, "b": 2}], [{"c": 1}, {"a": "x"}]),
    ({"type": "object", "propertyNames": {"pattern": "^x[0-9]$"}, "additionalProperties": {"type": "boolean"}},
     [{}, {"x1": True}, {"x1": True, "x2": False}], [{"y1": True}, {"x12": True}]),
    ({"type": "object", "properties": {"long_name": {"type": "null"}, "ab": {"type": "null"}},
      "propertyNames": {"maxLength": 3}},
     [{}, {"ab": None}], [{"long_name": None}]),
    ({"type": "object", "properties": {"zz": {"type": "null"}}, "propertyNames": {"pattern": "^x"},
      "patternProperties": {".*": {"type": "integer"}}},
     [{"xa": 1}], [{"zz": None}, {"ya": 1}]),
    ({"type": "object", "propertyNames": {"$ref": "#/$defs/n"}, "patternProperties": {".*": {"type": "number"}},
      "additionalProperties": False, "$defs": {"n": {"type": "string", "enum": ["p10", "p20"]}}},
     [{"p10": 1.5}, {"p10": 1, "p20": 2}], [{"p30": 1}]),
    # a generated key could be a dependency trigger: no extra members then
    ({"type": "object", "propertyNames": {"pattern": "^x"}, "additionalProperties": {"type": "integer"},
      "dependentRequired": {"xa": ["b"]}}, [{}], [{"xa": 1}, {"xb": 1}]),
    # oneOf: branches whose values may also satisfy another branch are not generated
    ({"oneOf": [{"type": "object", "properties": {"x": {"type": "integer"}}},
                {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}]},
     [{}], [{"x": 1}]),
    ({"oneOf": [{"format": "uuid"}, {"pattern": "^\\$[A-Z]+"}]},
     ["123e4567-e89b-12d3-a456-426614174000"], ["$ABC"]),
    ({"type": "string", "oneOf": [{"pattern": "^a"}, {"pattern": "^b"}]}, ["a", "bcd"], ["ca"]),
    # oneOf of closed all-optional objects: each branch generates a member the other forbids
    ({"type": "object", "oneOf": [
        {"properties": {"preset": {"enum": ["a", "b"]}}, "additionalProperties": False},
        {"properties": {"command": {"type": "string"}}, "additionalProperties": False}]},
     [{"preset": "a"}, {"command": "ls"}], [{}, {"preset": "a", "command": "ls"}]),
    # tagged unions written as if/then on one property: each tag gets its then and the elses
    ({"type": "object", "required": ["kind"],
      "properties": {"kind": {"enum": ["a", "b", "c"]}, "x": {"type": "integer"}, "y": {"type": "string"}},
      "allOf": [{"if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["x"]}},
                {"if": {"properties": {"kind": {"const": "b"}}}, "then": {"required": ["y"]},
                 "else": {"properties": {"y": False}}}]},
     [{"kind": "a", "x": 1}, {"kind": "b", "y": "s"}, {"kind": "b", "x": 2, "y": "s"}, {"kind": "c"}],
     [{"kind": "a"}, {"kind": "a", "x": 1, "y": "s"}, {"kind": "b"}, {"kind": "c", "y": "s"}]),
    ({"type": "object", "properties": {"t": {"type": "string"}, "n": {"type": "integer"}}, "required": ["t"],
      "if": {"properties": {"t": {"const": "num"}}, "required": ["t"]}, "then": {"required": ["n"]},
      "else": {"properties": {"n": False}}},
     [{"t": "num", "n": 3}, {"t": "other"}], [{"t": "num"}, {"t": "other", "n": 3}]),
    # if/then/else: a node with its own enum is filtered exactly; an impossible if+then takes else
    ({"type": "number", "if": {"maximum": 5}, "then": {"minimum": 5}, "else": {"minimum": 9},
      "minimum": 7, "enum": [1, 5, 7, 9, 10]}, [9, 10], [5, 7]),
    ({"type": "integer", "if": {"type": "string"}, "then": {"minLength": 1}, "else": {"minimum": 3}},
     [3, 40], [2]),
    # a ^literal$ pattern next to other patterns: the literal itself, checked against them
    ({"type": "string", "allOf": [{"pattern": "^tuple$"}, {"pattern": "^tu"}, {"maxLength": 9}]},
     ["tuple"], ["tu", "tuplex"]),
    # allOf of the same anyOf is that anyOf; large anyOf products keep a sound subset
    ({"allOf": [{"anyOf": [{"type": "integer"}, {"type": "null"}]},
                {"anyOf": [{"type": "integer"}, {"type": "null"}]}]}, [1, None], ["a"]),
    ({"allOf": [{"anyOf": [{"type": "integer", "minimum": i} for i in range(20)]},
                {"anyOf": [{"type": "integer", "maximum": 100 + i} for i in range(20)]}]}, [50], [-1, 200]),
]


def _validator(schema):
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.mark.parametrize("schema,good,bad", CASES, ids=[str(i) for i in range(len(CASES))])
def test_keyword_cases(schema_checker, schema, good, bad):
    schema_checker(schema, good, bad, walks=6)


def test_one_of_without_a_provable_branch_still_raises():
    with pytest.raises(ConstraintError) as info:
        schema_to_grammar({"oneOf": [{"type": "string"}, {"type": "string", "minLength": 2}]})
    assert info.value.keyword == "oneOf" and info.value.pointer == "#"


def test_literal_pattern_that_fails_another_pattern_is_unsatisfiable():
    with pytest.raises(ConstraintError, match="unsatisfiable"):
        schema_to_grammar({"type": "string", "allOf": [{"pattern": "^tuple$"}, {"pattern": "^x"}]})


def test_property_names_that_exclude_a_required_name_are_unsatisfiable():
    with pytest.raises(ConstraintError, match="unsatisfiable"):
        schema_to_grammar({"type": "object", "required": ["abcd"], "propertyNames": {"maxLength": 3}})




@pytest.mark.parametrize("schema", [
    {"type": "array", "uniqueItems": True, "items": {"enum": ["a", "b", 1, None]}},
    {"type": "array", "uniqueItems": True, "minItems": 2, "maxItems": 3, "items": {"enum": ["x", "y", "z", True]}},
    {"type": "array", "uniqueItems": True, "minItems": 3, "items": {"type": "boolean", "enum": [True, False, 0]}},
], ids=["any", "2-3", "unsatisfiable-3-of-2"])
def test_unique_items_over_an_enum_is_exact(vocab, schema):
    """Every sequence of up to 5 enum values, repeats included: the grammar accepts exactly the
    valid ones (no duplicate ever generated, none of the valid arrays lost)."""
    try:
        grammar = compile_grammar(vocab, "json_schema", schema)
    except ConstraintError as e:
        assert "unsatisfiable" in str(e) and schema["minItems"] > 2
        return
    values = schema["items"]["enum"]
    validator = _validator(schema)
    for n in range(6):
        for arr in itertools.product(values, repeat=n):
            text = json.dumps(list(arr), separators=(",", ":"))
            assert grammar.matches(text) == validator.is_valid(list(arr)), text


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"const": "x"}},
     "required": ["b"]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"const": "x"}},
     "minProperties": 2, "maxProperties": 2},
], ids=["required-b", "exactly-2"])
def test_members_in_any_order_each_once(vocab, schema):
    """Every arrangement of up to 4 member slots drawn from a, b, c (duplicates included): the
    grammar accepts exactly the valid objects, in any order, and never a repeated key."""
    grammar = compile_grammar(vocab, "json_schema", schema, key_order="any")
    values = {"a": "1", "b": "true", "c": '"x"'}
    validator = _validator(schema)
    for n in range(5):
        for keys in itertools.product("abc", repeat=n):
            text = "{" + ",".join(f'"{k}":{values[k]}' for k in keys) + "}"
            valid = len(set(keys)) == len(keys) and validator.is_valid(json.loads(text))
            assert grammar.matches(text) == valid, text
