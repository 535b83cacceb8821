"""``multipleOf`` and ``contains`` in the JSON Schema front end: schema -> accepted / rejected JSON
texts, exhaustive soundness of the number regexes against ``jsonschema``'s own multipleOf check
(float divisors use float division: 0.07 is not a multiple of 0.01), random walks on the
benchmark schemas, and the strict-mode errors."""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import jsonschema
import pytest
from radixlm.constrained import ConstraintError, TokenizerVocab, compile_grammar, schema_to_grammar
from radixlm.constrained.json_schema.normalize import clean, merge
from radixlm.constrained.testing.walks import random_walk, schema_regex

BENCH = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench"
BENCH_SCHEMAS = ["Github_trivial/Github_trivial---o83695.json", "Snowplow/Snowplow---sp_31_Normalized.json",
                 "Handwritten/Handwritten---itemscontains2.json"]

INT12 = {"type": "integer", "minimum": 0, "multipleOf": 12}
PRICE = {"type": "number", "multipleOf": 0.01}
# (schema, JSON texts that must be accepted, JSON texts that must be rejected)
CASES = [
    (INT12, ["0", "12", "24", "1992", "47988"], ["-12", "6", "25", "12.0", "1e2"]),
    (PRICE, ["0", "0.5", "0.50", "1.25", "599.99", "10", "10.00", "-3.5", "0.1"],
     ["0.07", "19.99", "0.29", "0.005", "1.001", "1e2"]),  # 0.07 / 0.01 = 7.000000000000001
    ({"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 1}, ["0", "0.25", "1", "1.00"],
     ["-0.25", "1.01", "1.1"]),
    ({"type": "number", "multipleOf": 2.5, "minimum": 0, "maximum": 100},
     ["0", "2.5", "5", "5.0", "97.5", "100", "100.0"], ["-2.5", "102.5", "1", "3.75", "2.50000"]),
    ({"type": "number", "multipleOf": 2.5}, ["-7.5", "123457.5", "10"], ["1.25", "3"]),
    ({"type": "integer", "multipleOf": 10, "exclusiveMinimum": -50, "maximum": 1000},
     ["-40", "0", "10", "990", "1000"], ["-50", "1010", "5", "-0"]),
    ({"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 99}, ["0", "3", "57", "99"],
     ["98", "-3", "102", "1"]),
    ({"type": "number", "multipleOf": 11}, ["0", "11", "-22", "121", "1001"], ["12", "11.5", "11.0"]),
    ({"type": "integer", "multipleOf": 8}, ["8", "1000", "123456", "-8", "99999992"], ["4", "12", "1004"]),
    ({"type": "number", "multipleOf": 0.25, "exclusiveMinimum": -1, "exclusiveMaximum": 1},
     ["-0.75", "0.5", "0.50", "0", "0.0"], ["1", "-1", "0.3", "-0"]),
    ({"type": "number", "multipleOf": 1}, ["0", "7", "-12"], ["1.5", "1.0"]),
    ({"allOf": [{"multipleOf": 4}, {"multipleOf": 6}], "type": "integer"}, ["0", "12", "36"], ["4", "6", "8"]),
    ({"allOf": [{"type": "integer", "multipleOf": 3}, {"multipleOf": 0.5, "minimum": 1}]}, ["3", "9"],
     ["0", "4", "1.5"]),
    ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "multipleOf": 5,
      "minimum": 10, "exclusiveMinimum": True}, ["15", "20"], ["10", "5"]),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}},
     ["[5]", "[1,5]", "[1,2,7,3]"], ["[]", "[1,2]", '["a",5]']),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "minContains": 2, "maxItems": 3},
     ["[5,6]", "[5,6,1]"], ["[5]", "[5,6,7,8]", "[1,5]"]),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "minContains": 0},
     ["[]", "[1,2]"], ['["a"]']),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False,
      "contains": {"type": "integer"}}, ['["a",1]'], ['["a"]', "[]", '["a",1,2]']),
    ({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"},
      "contains": {"type": "string"}, "maxContains": 1}, ['["a"]', '["a",1,2]'], ['[1]', '["a","b"]']),
    ({"type": "array", "contains": {"type": "integer"}, "maxContains": 1}, ["[3]"], ["[3,4]", "[]"]),
    ({"type": "array", "allOf": [{"contains": {"type": "number", "multipleOf": 11, "minimum": 100}},
                                 {"contains": {"type": "number", "multipleOf": 3}}]},
     ["[132]", "[165]", '[132,"x"]'], ["[33]", "[121]", "[]"]),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": {"type": "integer"},
      "contains": {"minimum": 5}, "maxContains": 1}, ["[5,6]"], ["[1]"]),  # draft 7: no maxContains
    ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "array", "items": {"type": "integer"},
      "contains": {"type": "string"}}, ["[]", "[1]"], ['["a"]']),  # draft 4: contains is unknown
]


def _validator(schema):
    cls = jsonschema.validators.validator_for(schema if isinstance(schema, dict) else {})
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.mark.parametrize("schema,good,bad", CASES, ids=[str(i) for i in range(len(CASES))])
def test_accepts_and_rejects(schema, good, bad):
    regex = re.compile(schema_regex(schema))
    validator = _validator(schema)
    for text in good:
        assert validator.is_valid(json.loads(text)), f"table error: {text} is not valid"
        assert regex.fullmatch(text), f"{text} should be accepted"
    for text in bad:
        assert regex.fullmatch(text) is None, f"{text} should be rejected"
    for text in good + bad:  # whatever the table says: never accept an invalid text
        assert not regex.fullmatch(text) or validator.is_valid(json.loads(text)), text


def _sound(schema, texts) -> int:
    """Asserts every text the regex accepts is valid; returns how many it accepted."""
    regex, validator = re.compile(schema_regex(schema)), _validator(schema)
    accepted = [t for t in texts if regex.fullmatch(t)]
    bad = [t for t in accepted if not validator.is_valid(json.loads(t))]
    assert not bad, f"{schema}: accepted invalid {bad[:10]}"
    return len(accepted)


def _decimals(lo: int, hi: int, digits: int) -> list[str]:
    """Every text with integer part in [lo, hi] (and -0) and 0..digits fraction digits."""
    fracs = [""] + ["." + "".join(p) for n in range(1, digits + 1) for p in itertools.product("0123456789", repeat=n)]
    heads = [str(i) for i in range(lo, hi + 1)] + (["-0"] if lo <= 0 else [])
    return [h + f for h in heads for f in fracs]


INTEGERS = [str(i) for i in range(-2000, 2001)] + ["-0"]
# (schema, the number of -2000..2000 it must accept: exact families accept all their multiples)
EXACT_INTEGER = [
    (INT12, 167), ({"type": "integer", "multipleOf": 10, "minimum": -50, "maximum": 1000}, 106),
    ({"type": "integer", "multipleOf": 8}, 501), ({"type": "integer", "multipleOf": 25}, 161),
    ({"type": "integer", "multipleOf": 3, "minimum": -99, "maximum": 99}, 67),
    ({"type": "integer", "multipleOf": 7, "exclusiveMaximum": 0}, 285),
    ({"type": "number", "multipleOf": 11, "minimum": 100}, 172), ({"type": "integer", "multipleOf": 0.5}, 4001),
    ({"type": "integer", "multipleOf": 2.5, "minimum": -1000}, 601),
]


@pytest.mark.parametrize("schema,count", EXACT_INTEGER, ids=lambda x: str(x)[:50])
def test_integers_exhaustively(schema, count):
    assert _sound(schema, INTEGERS) == count


def test_integer_multiples_of_inexact_floats_exhaustively():
    assert _sound({"type": "integer", "multipleOf": 0.01}, INTEGERS) >= 2500
    assert _sound({"type": "integer", "multipleOf": 0.1, "minimum": -300}, INTEGERS) >= 2000


@pytest.mark.parametrize("schema,lo,hi,digits,count", [
    (PRICE, -30, 120, 2, -14000),
    ({"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 99.99}, -3, 100, 3, -8000),
    ({"type": "number", "multipleOf": 0.1, "exclusiveMinimum": -3.3, "exclusiveMaximum": 70.7}, -5, 72, 3, -400),
    ({"type": "number", "multipleOf": 2.5}, -150, 150, 3, 182),
    ({"type": "number", "multipleOf": 0.25, "minimum": -2}, -5, 50, 3, 371),
    ({"type": "number", "multipleOf": 1.5, "maximum": 30}, -60, 40, 2, 92),
    ({"type": "number", "multipleOf": 0.3}, -40, 40, 2, -100),
    ({"type": "number", "multipleOf": 0.001, "minimum": 0}, -1, 5, 3, -500),
    ({"type": "number", "allOf": [{"multipleOf": 0.05}, {"multipleOf": 0.5}]}, -20, 20, 2, -100),
], ids=lambda x: str(x)[:40])
def test_decimals_exhaustively(schema, lo, hi, digits, count):
    """Exact families (2.5, 0.25, 1.5: every multiple in the range, written x, x.0 ... up to the
    divisor's decimals) give exact counts; float-checked ones (0.01, 0.1, 0.3) a lower bound
    (``count`` < 0: at least -count)."""
    accepted = _sound(schema, _decimals(lo, hi, digits))
    assert accepted == count if count > 0 else accepted >= -count


def test_prices_generate_every_valid_two_decimal_value_up_to_999():
    """The window of 0.01-multiples is complete: what jsonschema accepts, the regex accepts."""
    schema = {"type": "number", "multipleOf": 0.01, "minimum": 0}
    regex, validator = re.compile(schema_regex(schema)), _validator(schema)
    texts = [f"{i}.{f:02d}" for i in range(0, 1000, 7) for f in range(100)]
    valid = [t for t in texts if validator.is_valid(json.loads(t))]
    assert 0.7 * len(texts) < len(valid) < len(texts)  # the float check rejects some (0.07, 19.99, ...)
    assert all(regex.fullmatch(t) for t in valid)


def test_merge_keeps_every_divisor():
    a, b = clean({"multipleOf": 3}, "#", None), clean({"multipleOf": 3.0}, "#", None)
    merged = merge(merge(a, b, "#"), a, "#")["multipleOf"]
    assert [(type(d), d) for d in merged] == [(int, 3), (float, 3.0)]  # int and float checks differ
    c = clean({"contains": {"type": "integer"}, "minContains": 2}, "#/x", None)
    entries = merge(c, clean({"contains": {"minimum": 1}}, "#/y", None), "#")["contains"]
    assert [(e["min"], e["pointer"]) for e in entries] == [(2, "#/x"), (1, "#/y")]


@pytest.fixture(scope="module")
def vocab(tokenizer) -> TokenizerVocab:
    return TokenizerVocab.from_tokenizer(tokenizer)


def _walks_validate(grammar, schema, tokenizer, seeds: int, min_finished: int | None = None) -> list:
    """Every finished walk validates; at least ``min_finished`` (default: all) finish."""
    validator, values = _validator(schema), []
    for seed in range(seeds):
        walk = random_walk(grammar, random.Random(seed), max_tokens=40)
        if walk is None:
            continue
        text = tokenizer.decode(walk[0])
        assert validator.is_valid(json.loads(text)), f"{text!r} was generated but is invalid"
        assert grammar.validate_output(text) == []
        values.append(json.loads(text))
    need = seeds if min_finished is None else min_finished
    assert len(values) >= need, f"only {len(values)} of {seeds} walks reached an accepting state"
    return values


@pytest.mark.parametrize("name", BENCH_SCHEMAS)
def test_benchmark_schemas_compile_and_walk(tokenizer, vocab, name):
    doc = json.loads((BENCH / name).read_text())
    grammar = compile_grammar(vocab, "json_schema", doc["schema"])
    for test in doc["tests"]:
        if not test["valid"]:
            assert not grammar.matches(json.dumps(test["data"], separators=(",", ":"))), test["data"]
    # A walk left deep inside generic values, in an array that still needs a multiple of 33, is
    # beyond the greedy finisher (constrained/completion.py); most walks finish.
    _walks_validate(grammar, doc["schema"], tokenizer, 12, min_finished=4)


@pytest.mark.parametrize("schema", [PRICE, INT12, {"type": "number", "multipleOf": 0.1, "maximum": -2.5},
                                    {"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5},
                                     "minContains": 2}], ids=lambda s: str(s)[:40])
def test_random_walks_validate(tokenizer, vocab, schema):
    grammar = compile_grammar(vocab, "json_schema", schema)
    values = _walks_validate(grammar, schema, tokenizer, 12)
    assert len({json.dumps(v) for v in values}) > 3  # not one forced value


STRICT_CASES = [
    ({"type": "array", "items": {"type": "string"}, "contains": {"const": "a"}, "maxContains": 1, "minItems": 2},
     "#/maxContains"),
    ({"$defs": {"a": {"type": "array", "contains": {"type": "integer"}, "minContains": 3, "maxContains": 2}},
      "properties": {"x": {"$ref": "#/$defs/a"}}}, "#/$defs/a/maxContains"),
    ({"type": "array", "allOf": [{"contains": {"type": "integer"}, "maxContains": 1},
                                 {"contains": {"minimum": 3}, "minContains": 2}]}, "#/allOf/0/maxContains"),
    ({"type": "integer", "multipleOf": 0}, "#/multipleOf"),
    ({"type": "number", "properties": {}, "multipleOf": -2.5}, "#/multipleOf"),
    ({"type": "integer", "not": {"multipleOf": 3}}, "#/not"),
]


@pytest.mark.parametrize("schema,where", STRICT_CASES, ids=[w for _, w in STRICT_CASES])
def test_strict_errors_name_keyword_and_pointer(schema, where):
    with pytest.raises(ConstraintError) as info:
        schema_to_grammar(schema)
    assert info.value.location == where


def test_lenient_max_contains_is_relaxed():
    schema = {"type": "array", "items": {"type": "string"}, "contains": {"const": "a"}, "maxContains": 1,
              "minItems": 2}
    out = schema_to_grammar(schema, strict=False)
    assert out.relaxed == ["#/maxContains"]
    rx = out.grammar.to_regex()
    assert re.fullmatch(rx, '["b","a"]') and re.fullmatch(rx, '["a","a"]')
