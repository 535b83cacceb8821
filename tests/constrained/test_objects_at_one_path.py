"""Several runtime-checked objects at one path, checked together (``json_schema.unique.MemberUnion``),
any-order objects made checked beside them, and ``oneOf`` branches
kept exact when another branch requires a key they never generate (``combinators.one_of_branches``).

Every case is checked against ``jsonschema`` (valid instances accepted, invalid ones refused),
except the documented restrictions, which are listed with the reason."""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
import test_object_members as members
import test_unique_items as shared
import torch
from radixlm.constrained import CompiledGrammar, compile_grammar
from radixlm.constrained.json_schema.unique import MemberUnion
from radixlm.constrained.testing.walks import random_walk

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

INT, BOOL, STR = {"type": "integer"}, {"type": "boolean"}, {"type": "string"}
# Closed branches that each require a key the other never has.
KEYED = {"anyOf": [{"type": "object", "properties": {"a": INT, "b": INT}, "required": ["a", "b"],
                    "additionalProperties": False},
                   {"type": "object", "properties": {"c": INT, "d": INT}, "required": ["c", "d"],
                    "additionalProperties": False}]}
# One node but for `required` (an allOf with an anyOf of required lists, as docker-compose has).
SAME = {"allOf": [{"type": "object", "properties": {"build": INT, "image": STR, "x": BOOL},
                   "additionalProperties": False},
                  {"anyOf": [{"required": ["build"]}, {"required": ["image"]}]}]}
# An open branch beside a closed one that requires `referent`: the open one stops generating the
# extra key `referent` (a restriction).
OPEN = {"anyOf": [{"type": "object", "properties": {"type": STR, "version": STR}, "required": ["type", "version"]},
                  {"type": "object", "properties": {"type": {"enum": ["reference"]}, "referent": INT},
                   "required": ["type", "referent"], "additionalProperties": False}]}
# A large (checked) object and a small (any-order) one at one path: the small one is made checked.
BIG = {"type": "object", "properties": {"type": STR, **{f"p{i}": INT for i in range(9)}},
       "required": ["type", "p0"], "additionalProperties": False}
MIXED = {"type": "array", "items": {"anyOf": [BIG, OPEN["anyOf"][1]]}}
# oneOf: the first branch never has `rid`, which the second requires: no restriction is needed.
DISTRIBUTOR = {"oneOf": [{"type": "object", "properties": {"a": STR, "mode": {"enum": ["custom"]}},
                          "additionalProperties": False},
                         {"type": "object", "properties": {"rid": STR, "mode": {"enum": ["reference"]}},
                          "required": ["rid", "mode"], "additionalProperties": False}]}

CASES = [
    (KEYED, '{"b":1,"a":2}', True), (KEYED, '{"d":1,"c":2}', True), (KEYED, '{"a":1,"a":2}', False),
    (KEYED, '{"a":1,"d":2}', False), (KEYED, '{"a":1}', False), (KEYED, '{}', False),
    (KEYED, '{"c":1,"d":2,"c":3}', False), (KEYED, '{"a":1,"b":2,"c":3,"d":4}', False),
    (SAME, '{"build":1}', True), (SAME, '{"x":true,"image":"a"}', True), (SAME, '{"x":true,"build":1,"image":"z"}', True),
    (SAME, '{"x":true}', False), (SAME, '{}', False), (SAME, '{"build":"s"}', False),
    (SAME, '{"build":1,"build":2}', False), (SAME, '{"build":1,"y":2}', False),
    (OPEN, '{"type":"reference","referent":1}', True), (OPEN, '{"version":"1","type":"x","extra":2}', True),
    (OPEN, '{"type":"reference","referent":"s"}', False), (OPEN, '{"type":"x","referent":1}', False),
    (OPEN, '{"type":"reference"}', False), (OPEN, '{"referent":1,"type":"x","version":"2"}', True),
    (MIXED, '[{"type":"reference","referent":1},{"p8":1,"type":"a","p0":2}]', True),
    (MIXED, '[{"referent":1,"type":"reference"}]', True), (MIXED, '[{"type":"a"}]', False),
    (MIXED, '[{"p0":1,"referent":2,"type":"reference"}]', False), (MIXED, '[{"type":"x","referent":1}]', False),
    (MIXED, '[{"p0":1,"type":"a","p0":2}]', False),
    (DISTRIBUTOR, '{}', True), (DISTRIBUTOR, '{"a":"x"}', True), (DISTRIBUTOR, '{"mode":"reference","rid":"1"}', True),
    (DISTRIBUTOR, '{"rid":"1"}', False), (DISTRIBUTOR, '{"a":"x","rid":"1","mode":"reference"}', False),
    (DISTRIBUTOR, '{"mode":"reference"}', False),
]

tiny_vocab, real = shared.tiny_vocab, shared.real  # the vocabularies, shared fixtures


@pytest.mark.parametrize("schema,text,expected", CASES, ids=[f"{i}:{c[1][:30]}" for i, c in enumerate(CASES)])
def test_instances(tiny_vocab, schema, text, expected):
    """The table agrees with ``jsonschema`` (a key written twice is never valid), and the
    matcher accepts exactly the valid instances (the objects here keep the grammar's any order,
    or, past ``RUNTIME_CHECK_ABOVE`` members, are checked at runtime)."""
    grammar = compile_grammar(tiny_vocab, "json_schema", schema, key_order="any")
    repeats: list = []
    value = json.loads(text, object_pairs_hook=lambda pairs: repeats.append(len({k for k, _ in pairs}) < len(pairs))
                       or dict(pairs))
    valid = not any(repeats) and jsonschema.validators.validator_for(schema)(schema).is_valid(value)
    assert expected == valid, text
    assert grammar.matches(text) == expected, text


def test_open_branch_restriction(tiny_vocab, monkeypatch):
    """Checked together, the open branch of ``OPEN`` no longer generates the extra key
    ``referent`` that the closed one requires (a restriction); the rest is exact."""
    monkeypatch.setattr("radixlm.constrained.json_schema.objects.RUNTIME_CHECK_ABOVE", -1)
    grammar = compile_grammar(tiny_vocab, "json_schema", OPEN, key_order="any")
    assert not grammar.matches('{"referent":1,"type":"x","version":"2"}')
    for schema, text, expected in CASES:
        if schema is OPEN and "referent\":1,\"type\":\"x\",\"version" not in text:
            assert grammar.matches(text) == expected, text


@pytest.mark.parametrize("schema,unions", [(KEYED, 1), (SAME, 1), (OPEN, 1), (MIXED, 1)])
def test_checked_together(tiny_vocab, monkeypatch, schema, unions):
    """The objects of one path share one check (a union), with every object checked (the
    any-order ones beside a checked one are made checked)."""
    monkeypatch.setattr("radixlm.constrained.json_schema.objects.RUNTIME_CHECK_ABOVE",
                        -1 if schema is not MIXED else 8)
    grammar = compile_grammar(tiny_vocab, "json_schema", schema, key_order="any")
    specs = grammar.unique.specs if grammar.unique is not None else ()
    assert sum(isinstance(s, MemberUnion) for s in specs) == unions


@pytest.mark.parametrize("schema,texts", [
    (MIXED, ['[{"type":"reference","referent":12},{"p1":3,"type":"ref","p0":2,"p8":1}]']),
    (SAME, ['{"x":true,"image":"build","build":3}']),
    (OPEN, ['{"type":"referent","version":"1","referents":2,"refer":3}', '{"referent":4,"type":"reference"}']),
], ids=["mixed", "same", "open"])
def test_masks_equal_accept_token(real, monkeypatch, schema, texts):
    """At every prefix of the texts and of walks, the masks equal ``accept_token``."""
    if schema is not MIXED:
        monkeypatch.setattr("radixlm.constrained.json_schema.objects.RUNTIME_CHECK_ABOVE", -1)
    tokenizer, vocab = real
    grammar = compile_grammar(vocab, "json_schema", schema, key_order="any")
    assert any(isinstance(s, MemberUnion) for s in grammar.unique.specs)
    plain = CompiledGrammar(vocab, grammar.lark, "json_schema", schema)
    rng, row = random.Random(0), torch.zeros(vocab.mask_words, dtype=torch.int32)
    wide = np.zeros(vocab.mask_words * 32, dtype=bool)
    wide[[t for t, b in enumerate(vocab.token_bytes) if b and any(c in b for c in b'",}{')]] = True
    paths = [tokenizer.encode(t) for t in texts]
    paths += [w[0] for w in (random_walk(grammar, random.Random(s), max_tokens=40) for s in range(2)) if w]
    for ids in paths:
        m, p = grammar.matcher(), plain.matcher()
        for n in range(len(ids) + 1):
            if n:
                assert m.accept_token(ids[n - 1]) and p.accept_token(ids[n - 1]), n
            shared.assert_masks_agree(m, p, row, rng, wide)


@pytest.mark.parametrize("schema", [KEYED, SAME, OPEN, MIXED, DISTRIBUTOR])
def test_random_walks_validate(tiny_vocab, schema):
    members.assert_walks_validate(compile_grammar(tiny_vocab, "json_schema", schema, key_order="any"), 80)
