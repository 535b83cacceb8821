"""Table-driven tests of the JSON Schema front end: schema -> accepted / rejected instances, each
format, and each strict-mode rejection with its JSON pointer."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from radixlm.constrained import ConstraintError, compile_grammar, schema_to_grammar
from radixlm.constrained.testing.walks import compact_json, random_walk

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

# (schema, instances that must be accepted, instances that must be rejected)
CASES = [
    ({"type": "integer", "minimum": -3, "maximum": 12}, [-3, 0, 9, 12], [-4, 13, 1.5, "1"]),
    ({"type": "integer", "exclusiveMinimum": 5, "exclusiveMaximum": 100}, [6, 99], [5, 100]),
    ({"type": "integer", "minimum": 5, "exclusiveMinimum": True}, [6], [5]),  # draft 4 form
    ({"type": "number", "minimum": 0.5, "maximum": 3}, [1, 2.75, 3], [0.25, 3.5, -1]),
    ({"type": "number"}, [0, -1.5, 2e10, 1.25], ["x", None]),
    ({"type": "string", "minLength": 2, "maxLength": 4}, ["ab", "abcd", "é漢字"], ["a", "abcde"]),
    ({"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"}, ["ab-12"], ["ab-1", "AB-12"]),
    ({"type": "string", "pattern": "ab"}, ["xaby", "ab"], ["ba"]),
    ({"type": "string", "pattern": '^"q"$'}, ['"q"'], ["q"]),
    ({"enum": ["a", 1, None, [1, 2], {"k": True}]}, ["a", 1, None, [1, 2], {"k": True}], ["b", 2, []]),
    ({"const": {"x": [1, "y"]}}, [{"x": [1, "y"]}], [{"x": [1]}]),
    ({"type": ["string", "null"]}, ["s", None], [1, True]),
    ({"type": "boolean"}, [True, False], [0, "true"]),
    (True, [1, "x", None, [1], {"a": 2}], []),  # unconstrained values nest one container deep
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
     [[1], [1, 2, 3]], [[], [1, 2, 3, 4], ["a"]]),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
     [["a", 1], ["a"], []], [["a", 1, 2], [1]]),
    ({"$schema": "http://json-schema.org/draft-07/schema#",
      "type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "boolean"}},
     [["a", True, False]], [["a", 1]]),  # draft 4-2019 tuple form
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["b"]},
     [{"b": "x"}, {"a": 1, "b": "x"}, {"b": "x", "c": 1}, {"c": [1], "b": "x", "a": 2}],
     [{"a": 1}, {"b": 1}, {"b": "x", "a": "y"}, {"c": 1}]),  # unspecified additionalProperties: extras
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["b"],
      "x-radixlm": {"additional_properties": "declared"}},
     [{"b": "x"}, {"a": 1, "b": "x"}], [{"a": 1}, {"b": 1}, {"b": "x", "c": 1}]),  # declared members only
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}},
      "dependentRequired": {"a": ["b"]}},
     [{}, {"c": "x"}, {"b": "x"}, {"a": "x", "b": "y"}, {"b": "y", "z": 1, "a": "x"}],
     [{"a": "x"}, {"a": "x", "c": "y"}]),  # exact in any order: a needs b only when present
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2, "maxProperties": 3},
     [{"a": 1, "x": 2}, {"y": 1, "a": 1}, {"x": 1, "y": 2}, {"x": 1, "y": 2, "z": 3}, {"x": 1, "a": 2, "y": 3}],
     [{"a": 1}, {"x": 1}, {}, {"a": 1, "x": 2, "y": 3, "z": 4}, {"a": "1", "x": 2}]),  # counted extras
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     [{"a": 1, "zz": "s"}, {"q": "s"}, {}], [{"a": "s"}, {"zz": 1}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
     [{"a": 1}, {}], [{"b": 1}]),
    ({"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "integer"}}, "additionalProperties": False},
     [{"x-ab": 1}, {}], [{"x-ab": "s"}, {"y": 1}]),
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
      "minProperties": 1}, [{"a": "x"}, {"b": "y"}], [{}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependentRequired": {"a": ["b"]}}, [{"a": 1, "b": 2}, {"b": 2}], [{"a": 1}]),
    ({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer", "minimum": 10}]},
     ["ab", 10], ["abc", 9]),
    ({"oneOf": [{"type": "string"}, {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]}]},
     ["s", {"k": 1}], [1, {"k": 2}]),
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"a": {"minimum": 5}, "b": {"type": "boolean"}}}]},
     [{"a": 5}, {"a": 7, "b": True}], [{"a": 4}, {"b": True}]),
    ({"$defs": {"pos": {"type": "integer", "minimum": 1}}, "type": "array", "items": {"$ref": "#/$defs/pos"}},
     [[1, 2]], [[0]]),
    ({"definitions": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                                "next": {"$ref": "#/definitions/node"}},
                                "required": ["v"]}},
      "$ref": "#/definitions/node"}, [{"v": 1}, {"v": 1, "next": {"v": 2}}], [{"next": {"v": 1}}]),
    ({"type": "object", "properties": {"t": {"not": {}}, "u": {"type": "integer"}}},
     [{"u": 1}], [{"t": 1, "u": 1}]),
    ({"not": {"type": "string"}, "enum": ["a", 1]}, [1], ["a"]),
    # not: each supported form (the last list includes the values the `not` excludes)
    ({"type": ["string", "integer", "null"], "not": {"type": "integer"}}, ["s", None], [1, True]),
    ({"type": ["boolean", "null"], "not": {"const": False}}, [True, None], [False, 0]),
    ({"type": ["boolean", "null"], "not": {"enum": [None, True]}}, [False], [None, True]),
    ({"type": "string", "not": {"enum": ["a", "ab"]}}, ["", "b", "abc", "aa"], ["a", "ab", 1]),
    ({"type": "string", "minLength": 1, "not": {"const": "ab"}}, ["abc", "xyz"], ["ab", ""]),
    ({"type": "integer", "minimum": 0, "maximum": 9, "not": {"enum": [3, 5.0]}}, [0, 4, 6, 9], [3, 5, 10]),
    ({"type": "number", "not": {"const": 1.5}}, [1, 2, -1.5], [1.5]),  # bounds round inward
    ({"type": "integer", "not": {"minimum": 10}}, [9, -3], [10, 11]),
    ({"type": "number", "not": {"exclusiveMaximum": 2}}, [2, 3.5], [1.5, 1]),
    ({"type": "string", "not": {"maxLength": 2}}, ["abc"], ["ab", ""]),
    ({"type": "array", "not": {"minItems": 2}}, [[], [1]], [[1, 2]]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "not": {"required": ["a", "b"]}}, [{"b": 1}, {}], [{"a": 1, "b": 2}, {"a": 1}]),
    ({"type": "string", "minLength": 1, "not": {"pattern": "^[.,*\\s-]+$"}}, ["a.", "Zz"], [".,", " ", ""]),
    ({"type": ["string", "null"], "not": {"type": "string"}}, [None], ["s", 1]),
    ({"type": "integer", "not": {"type": "string", "minLength": 2}}, [1], ["ab"]),  # disjoint: ignored
    ({"allOf": [{"enum": [{"a": 1}, {"a": 2}, 3]}, {"not": {"properties": {"a": {"const": 1}}}}]},
     [{"a": 2}], [{"a": 1}, 3]),  # not of anything, resolved by the enum (checked exactly)
    ({"not": {"not": {"type": "string"}}}, ["a"], [1, None]),
    # oneOf: disjoint on what we generate (objects only; no undeclared members; a member another
    # branch requires is left out of a branch where it is optional)
    ({"properties": {"c": {"oneOf": [
        {"additionalProperties": False, "properties": {"p": {"type": "string"}}, "required": ["p"]},
        {"additionalProperties": False, "properties": {"p": {"type": "string"}, "s": {"type": "integer"}},
         "required": ["p", "s"]}]}}, "required": ["c"]},
     [{"c": {"p": "m"}}, {"c": {"p": "v", "s": 1}}], [{"c": {"p": "m", "s": "x"}}, {"c": "x"}, {"c": 1}]),
    ({"type": "object", "oneOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                  {"properties": {"e": {"type": "string"}}, "required": ["e"]}]},
     [{"a": 1}, {"e": "x"}], [{"a": 1, "e": "x"}, {}]),
    ({"type": "object", "additionalProperties": False, "properties": {"j": {"type": "integer"}, "p": {"type": "integer"}},
      "oneOf": [{"required": ["p"]}, {"required": ["j"]}]}, [{"p": 1}, {"j": 1}], [{"j": 1, "p": 1}, {}]),
    ({"type": "object", "oneOf": [
        {"properties": {"status": {"type": "string", "pattern": "^ok$"}, "d": {"type": "integer"}}, "required": ["status"]},
        {"properties": {"status": {"type": "string", "pattern": "^fail$"}}, "required": ["status"]}]},
     [{"status": "ok", "d": 1}, {"status": "fail"}], [{"status": "ok", "d": "x"}, {"status": "x"}, {}]),
    ({"type": "object", "additionalProperties": {"type": "integer"}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
     [{"a": 1}, {"b": 1}, {"a": 1, "z": 2}], [{"a": 1, "b": 2}, {}]),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [[], [4]], [[4, 4]]),
    ({"title": "T", "description": "d", "examples": [1], "default": 2, "$comment": "c", "type": "integer",
      "deprecated": True, "readOnly": True}, [1], ["x"]),
    ({"if": {"properties": {"k": {"const": 1}}}, "then": {"required": ["v"]},
      "type": "object", "properties": {"k": {"type": "integer"}, "v": {"type": "string"}}, "required": ["k"]},
     [{"k": 1, "v": "x"}], [{"k": 1}]),
]

FORMAT_CASES = {
    "date": (["2024-02-28", "1999-12-31"], ["2024-02-30", "2024-13-01", "24-01-01"]),
    "time": (["12:30:59Z", "23:59:00.5+02:00"], ["24:00:00Z", "12:30"]),
    "date-time": (["2024-01-31T08:00:00Z"], ["2024-01-31 08:00:00Z", "2024-01-32T08:00:00Z"]),
    "email": (["a.b@example.com", "x+y@mail.co.uk"], ["a@b", "@example.com", "a b@x.com"]),
    "uuid": (["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000"]),
    "uri": (["https://example.com/a/b?x=1#f", "urn:isbn:123"], ["example.com", "http://a b"]),
    "ipv4": (["192.168.0.1", "0.0.0.0"], ["256.1.1.1", "01.2.3.4", "1.2.3"]),
    "ipv6": (["::1", "2001:db8::ff00:42:8329", "1:2:3:4:5:6:7:8"], ["1:2:3", "12345::1"]),
    "hostname": (["example.com", "a-b.c"], ["-a.com", "a..b"]),
}

# (schema, the JSON pointer + keyword that strict mode must name)
STRICT_CASES = [
    ({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True, "minItems": 2}}},
     "#/properties/tags/uniqueItems"),
    ({"type": "integer", "not": {"multipleOf": 3}}, "#/not"),
    ({"type": "array", "items": {"type": "string"}, "contains": {"const": "a"}, "maxContains": 1, "minItems": 2},
     "#/maxContains"),
    ({"properties": {"a": {"not": {"type": "string", "format": "email"}}}}, "#/properties/a/not"),
    ({"type": "string", "pattern": "^(?=a)"}, "#/pattern"),
    ({"type": "string", "pattern": "^a{5}$", "maxLength": 3}, "#/maxLength"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "#/oneOf"),
    ({"oneOf": [{"type": "string"}, {"type": "string", "minLength": 2}]}, "#/oneOf"),
    ({"oneOf": [{"minimum": 1}, {"maximum": 5}]}, "#/oneOf"),
    ({"type": "object", "oneOf": [{"properties": {"s": {"type": "string", "pattern": "^ok$"}}, "required": ["s"]},
                                  {"properties": {"s": {"type": "string", "pattern": "^o"}}, "required": ["s"]}]},
     "#/oneOf"),
    # disjointness proofs must not validate against the node being decomposed (circular)
    ({"oneOf": [{"enum": ["a", "b"]}, {"type": "string"}]}, "#/oneOf"),
    ({"type": "number", "not": {"type": "integer"}}, "#/not"),
    ({"type": "array", "not": {"const": [1]}}, "#/not"),
    ({"allOf": [{"type": "integer"}, {"not": {"minimum": 1, "maximum": 5}}]}, "#/allOf/1/not"),
    ({"$ref": "https://example.com/schema.json"}, "#/$ref"),
    ({"$defs": {"a": {"type": "array", "contains": {}, "minContains": 3, "maxContains": 2}}, "$ref": "#/$defs/a"},
     "#/$defs/a/maxContains"),
]


def _validator(schema):
    cls = jsonschema.validators.validator_for(schema if isinstance(schema, dict) else {})
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.mark.parametrize("schema,good,bad", CASES, ids=[str(i) for i in range(len(CASES))])
def test_schema_accepts_and_rejects(schema_checker, schema, good, bad):
    schema_checker(schema, good, bad)


@pytest.mark.parametrize("schema", [c[0] for c in CASES if "'not'" in str(c[0]) or "oneOf" in str(c[0])],
                         ids=lambda s: str(s)[:40])
def test_not_random_walks_validate(vocab, schema):
    """Soundness of every `not` / `oneOf` form: uniformly sampled outputs (an untrained model) validate."""
    grammar = compile_grammar(vocab, "json_schema", schema)
    validator = _validator(schema)
    for seed in range(8):
        walk = random_walk(grammar, random.Random(seed), max_tokens=30)
        assert walk is not None
        text = b"".join(vocab.token_bytes[t] for t in walk[0]).decode("utf-8")
        assert validator.is_valid(json.loads(text)), f"{text!r} was generated but is invalid"


@pytest.mark.parametrize("fmt", sorted(FORMAT_CASES))
def test_formats(vocab, fmt):
    schema = {"type": "string", "format": fmt}
    grammar = compile_grammar(vocab, "json_schema", schema)
    good, bad = FORMAT_CASES[fmt]
    for s in good:
        assert grammar.matches(compact_json(s)), f"{fmt}: {s!r} should be accepted"
        assert grammar.validate_output(compact_json(s)) == []
    for s in bad:
        assert not grammar.matches(compact_json(s)), f"{fmt}: {s!r} should be rejected"


@pytest.mark.parametrize("schema,where", STRICT_CASES, ids=[w for _, w in STRICT_CASES])
def test_strict_rejections_name_keyword_and_pointer(schema, where):
    with pytest.raises(ConstraintError) as info:
        schema_to_grammar(schema)
    assert info.value.location == where
    assert where in str(info.value)


def test_lenient_mode_relaxes_and_reports(vocab):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "not": {"multipleOf": 3}}}, "required": ["n"]}
    grammar = compile_grammar(vocab, "json_schema", schema, strict=False)
    assert grammar.relaxed == ["#/properties/n/not"]
    assert grammar.matches('{"n":3}')  # relaxed: generated, then reported
    assert grammar.validate_output('{"n":3}') and grammar.validate_output('{"n":4}') == []
    assert grammar.validate_output("{") and grammar.validate_output('{"n":"x"}')


def test_whitespace_pattern(vocab):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    compact = compile_grammar(vocab, "json_schema", schema)
    spaced = compile_grammar(vocab, "json_schema", schema, whitespace_pattern="[ ]?")
    assert compact.matches('{"a":1}') and not compact.matches('{ "a": 1 }')
    assert spaced.matches('{ "a": 1 }') and spaced.matches('{"a":1}')


def test_errors_name_the_problem():
    with pytest.raises(ConstraintError, match="unsatisfiable"):
        schema_to_grammar({"type": "integer", "minimum": 5, "maximum": 1})
    with pytest.raises(ConstraintError, match="does not resolve"):
        schema_to_grammar({"$ref": "#/definitions/missing"})
    with pytest.raises(ConstraintError, match="unknown type"):
        schema_to_grammar({"type": "strin"})
    with pytest.raises(ConstraintError, match="must be an object or a boolean"):
        schema_to_grammar({"properties": {"a": 3}})


def test_recursion_is_a_rule_of_any_depth(vocab):
    schema = {"$defs": {"t": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
                              "additionalProperties": False}},
              "$ref": "#/$defs/t"}
    out = schema_to_grammar(schema)
    assert out.recursive and out.lark.count('"kids"') <= 2 and len(out.lark) < 300  # rules, not unrolled
    grammar = compile_grammar(vocab, "json_schema", schema)
    deep: dict = {}
    for _ in range(80):  # 80 levels: past any unrolling, and past the documented 64
        deep = {"kids": [deep, {}]}
    assert grammar.matches(json.dumps(deep, separators=(",", ":")))
    assert not grammar.matches('{"kids":[{"kids":1}]}')
