"""Key order (``json_key_order``): the default writes declared properties in schema order (optional
ones may be skipped) and undeclared members only where the schema declares them; ``"any"`` takes
members in any order and extras wherever JSON Schema allows them. One table, both orders."""

from __future__ import annotations

import importlib
import json

import jsonschema
import pytest
from radixlm.constrained import ConstraintError, adapters, compile_grammar
from radixlm.constrained.compile.worker import CompileRequest
from radixlm.constrained.testing.schema_order import schema_order_instances, to_schema_order
from radixlm.constrained.testing.walks import forced_count
from radixlm.runtime.sampling_params import SamplingParams

S, N, B = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
REQ_AB = {"type": "object", "properties": {"b": N, "a": S}, "required": ["b", "a"]}
OPT = {"type": "object", "properties": {"x": N, "y": B, "z": S}, "required": ["y"]}
CLOSED = {**REQ_AB, "additionalProperties": False}
OPEN = {**REQ_AB, "additionalProperties": True}
TYPED = {**REQ_AB, "additionalProperties": B}
PATTERN = {"type": "object", "properties": {"id": N}, "required": ["id"], "patternProperties": {"^x_": S}}
NESTED = {"type": "object", "properties": {"outer": {"type": "object", "properties": {"q": N, "p": N},
                                                      "required": ["q", "p"]}, "k": B}, "required": ["outer", "k"]}
BARE = {"type": "object"}
MIN_MORE = {"type": "object", "properties": {"a": N}, "minProperties": 2}
DEPENDENT = {"type": "object", "properties": {"card": S, "billing": S}, "dependentRequired": {"card": ["billing"]},
             "additionalProperties": False}
EXACTLY_2 = {"type": "object", "properties": {"a": N, "b": N, "c": N}, "minProperties": 2, "maxProperties": 2,
             "additionalProperties": False}

# (id, schema, text, accepted in schema order, accepted in any order)
CASES = [
    ("schema order", REQ_AB, '{"b":1,"a":"s"}', True, True),
    ("permutation", REQ_AB, '{"a":"s","b":1}', False, True),
    ("missing required", REQ_AB, '{"b":1}', False, False),
    ("optional skipped", OPT, '{"y":true}', True, True),
    ("optional kept in order", OPT, '{"x":1,"y":true,"z":"s"}', True, True),
    ("optional out of order", OPT, '{"y":true,"x":1}', False, True),
    ("absent: extra dropped", REQ_AB, '{"b":1,"a":"s","c":0}', False, True),
    ("false: no extra", CLOSED, '{"b":1,"a":"s","c":0}', False, False),
    ("false: permutation", CLOSED, '{"a":"s","b":1}', False, True),
    ("true: extra", OPEN, '{"b":1,"a":"s","c":[0]}', True, True),
    ("true: extra between", OPEN, '{"b":1,"c":0,"a":"s"}', True, True),
    ("schema: typed extra", TYPED, '{"b":1,"a":"s","c":true}', True, True),
    ("schema: mistyped extra", TYPED, '{"b":1,"a":"s","c":1}', False, False),
    ("pattern key", PATTERN, '{"id":1,"x_a":"v"}', True, True),
    ("pattern: other key", PATTERN, '{"id":1,"other":"v"}', False, True),
    ("nested in order", NESTED, '{"outer":{"q":1,"p":2},"k":true}', True, True),
    ("nested permuted", NESTED, '{"outer":{"p":2,"q":1},"k":true}', False, True),
    ("outer permuted", NESTED, '{"k":true,"outer":{"q":1,"p":2}}', False, True),
    ("bare object: any member", BARE, '{"m":1,"n":[true]}', True, True),
    ("minProperties past the declared", MIN_MORE, '{"a":1,"e":2}', True, True),
    ("minProperties: too few", MIN_MORE, '{"a":1}', False, False),
    ("dependency met", DEPENDENT, '{"card":"c","billing":"b"}', True, True),
    ("dependency missing", DEPENDENT, '{"card":"c"}', False, False),
    ("need alone", DEPENDENT, '{"billing":"b"}', True, True),
    ("exactly two", EXACTLY_2, '{"a":1,"c":3}', True, True),
    ("exactly two: three", EXACTLY_2, '{"a":1,"b":2,"c":3}', False, False),
]


@pytest.fixture(scope="module")
def grammars(vocab) -> dict:
    """Each table schema compiled once per key order."""
    out = {}
    for _, schema, *_ in CASES:
        key = json.dumps(schema, sort_keys=True)
        if key not in out:
            out[key] = {order: compile_grammar(vocab, "json_schema", schema, key_order=order)
                        for order in ("schema", "any")}
    return out


@pytest.mark.parametrize("schema,text,in_schema,in_any", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_key_order_table(grammars, schema, text, in_schema, in_any):
    valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
    assert valid or not (in_schema or in_any), f"table error: {text} is invalid"
    compiled = grammars[json.dumps(schema, sort_keys=True)]
    assert compiled["schema"].matches(text) == in_schema, text
    assert compiled["any"].matches(text) == in_any, text


def test_the_default_is_schema_order(vocab):
    assert SamplingParams().json_key_order == "schema"
    assert CompileRequest("json_schema", {}).key_order == "schema"
    default = compile_grammar(vocab, "json_schema", REQ_AB)
    assert default.matches('{"b":1,"a":"s"}') and not default.matches('{"a":"s","b":1}')


@pytest.mark.parametrize("bad", ["sorted", "", None, 1, ["any"]])
def test_a_bad_key_order_names_the_field(bad):
    with pytest.raises(ValueError, match="json_key_order") as err:
        SamplingParams(json_schema=REQ_AB, json_key_order=bad)
    assert err.value.field == "json_key_order"
    with pytest.raises(ConstraintError, match="json_key_order"):
        compile_grammar(None, "json_schema", REQ_AB, key_order=bad)


def test_the_cache_key_differs_between_orders():
    keys = {CompileRequest("json_schema", REQ_AB, key_order=order).cache_key() for order in ("schema", "any")}
    assert len(keys) == 2
    regex = {CompileRequest("regex", "a+", key_order=order).cache_key() for order in ("schema", "any")}
    assert len(regex) == 1  # only schemas have members


@pytest.mark.parametrize("core", ["llguidance", "xgrammar"])
def test_other_backends_refuse_any_order(vocab, core):
    try:
        module = importlib.import_module(adapters.adapter_compile_fn(core).split(":")[0])
    except ValueError as e:  # the package is missing: the message names the pip requirement
        pytest.skip(str(e))
    with pytest.raises(ConstraintError, match="radixlm grammar backend"):
        module.compile_request(vocab, CompileRequest("json_schema", REQ_AB, key_order="any"))


def test_forced_text_under_schema_order(vocab):
    """After a required member's value the next key is forced, and ``}`` once no member may follow."""
    grammar = compile_grammar(vocab, "json_schema", {"type": "object", "properties": {
        "name": S, "ok": B, "note": S}, "required": ["name", "ok"], "additionalProperties": False})
    matcher = grammar.matcher()
    for t in vocab_ids(grammar, '{"name":"x"'):
        assert matcher.accept_token(t)
    assert matcher.forced_continuation() == ',"ok":'
    full = grammar.matcher()
    for t in vocab_ids(grammar, '{"name":"x","ok":true,"note":"y"'):
        assert full.accept_token(t)
    assert full.forced_continuation() == "}"


def vocab_ids(grammar, text: str) -> list[int]:
    """``text`` as single-byte tokens of the grammar's vocabulary."""
    return [grammar.vocab.byte_tokens[b] for b in text.encode()]


def test_rewriter_orders_and_drops():
    value = {"a": "s", "c": 0, "b": 1}
    assert list(to_schema_order(REQ_AB, value)) == ["b", "a"]
    assert list(to_schema_order(OPEN, value)) == ["b", "a", "c"]
    nested = {"k": True, "outer": {"p": 2, "q": 1}}
    assert json.dumps(to_schema_order(NESTED, nested)) == '{"outer": {"q": 1, "p": 2}, "k": true}'
    kept, dropped = schema_order_instances(MIN_MORE, [{"e": 1, "a": 2}])
    assert kept == [{"a": 2, "e": 1}] and dropped == 0


# (schema, document, forced bytes in schema order, in any order): byte tokens, so the counts are the
# document's bytes that lie inside forced text (jump-forward's saved passes on a byte vocabulary)
FORCED = [
    ({"type": "object", "properties": {"name": S, "ok": B}, "required": ["name", "ok"],
      "additionalProperties": False}, '{"name":"x","ok":true}', 19, 18),
    (NESTED, '{"outer":{"q":1,"p":2},"k":true}', 27, 14),
    (OPT, '{"y":false}', 8, 7),
]


@pytest.mark.parametrize("schema,text,in_schema,in_any", FORCED, ids=["two-required", "nested", "optional"])
def test_forced_share_of_fixed_documents(vocab, schema, text, in_schema, in_any):
    ids = [vocab.byte_tokens[b] for b in text.encode()]
    for order, expected in (("schema", in_schema), ("any", in_any)):
        grammar = compile_grammar(vocab, "json_schema", schema, key_order=order)
        assert forced_count(grammar, ids) == expected, order
