"""Object members checked at runtime by the matcher (``json_schema.objects``, ``member_check``,
``member_mask``): any order, each key at most once (named or extra), required /
``dependentRequired`` members and ``minProperties`` before ``}``, at most ``maxProperties``;
exhaustive arrangements of member slots, 12-member objects, nesting, the grammar-level fallback
where the path is ambiguous, masks equal to ``accept_token`` on a real vocabulary (Qwen2's,
else the 32k test vocabulary), random walks that validate, rollback/copy and completions."""

from __future__ import annotations

import itertools
import json
import random

import jsonschema
import numpy as np
import pytest
import test_unique_items as shared
import torch
from radixlm.constrained import CompiledGrammar, compile_grammar
from radixlm.constrained.json_schema import schema_to_grammar
from radixlm.constrained.testing.walks import compact_json, random_walk

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

INT, BOOL, STR = {"type": "integer"}, {"type": "boolean"}, {"type": "string"}
ABC = {"a": INT, "b": BOOL, "c": STR}
VALUES = {"a": "1", "b": "true", "c": '"x"', "x": "2", "y": "3"}
SCHEMAS = {
    "required-a": {"type": "object", "properties": ABC, "required": ["a"], "additionalProperties": False},
    "extras": {"type": "object", "properties": {"a": INT, "b": BOOL}, "additionalProperties": INT},
    "dependent": {"type": "object", "properties": ABC, "dependentRequired": {"b": ["c"]}, "minProperties": 2,
                  "additionalProperties": False},
    "max-2": {"type": "object", "properties": ABC, "required": ["c"], "maxProperties": 2},
    "extras-only": {"type": "object", "minProperties": 1, "maxProperties": 2},
    "exactly-3": {"type": "object", "properties": {"a": INT, "b": BOOL}, "minProperties": 3, "maxProperties": 3},
}
TWELVE = {"type": "object", "properties": {f"k{i}": INT for i in range(12)},
          "required": [f"k{i}" for i in range(0, 12, 3)], "additionalProperties": False}
NESTED = {"type": "object", "additionalProperties": False, "required": ["inner"], "properties": {
    "inner": {"type": "object", "properties": ABC, "required": ["b"], "additionalProperties": False},
    "list": {"type": "array", "items": {"type": "object", "properties": {"p": INT, "q": INT}, "required": ["q"],
                                        "additionalProperties": False}}}}
AMBIGUOUS = {"anyOf": [{"type": "object", "properties": {"a": INT, "b": INT}, "required": ["a", "b"],
                        "additionalProperties": False},
                       {"type": "object", "properties": {"a": BOOL, "b": BOOL, "c": INT}, "required": ["a", "c"],
                        "additionalProperties": INT}]}


@pytest.fixture(autouse=True)
def check_every_object(monkeypatch):
    """The runtime check on small objects too (by default objects of up to 4 named members keep
    the grammar's own any-order rules, which cost nothing per mask)."""
    monkeypatch.setattr("radixlm.constrained.json_schema.objects.RUNTIME_CHECK_ABOVE", -1)


real, tiny_vocab = shared.real, shared.tiny_vocab  # the vocabularies, shared fixtures


def _valid(schema, text: str, keys: list[str]) -> bool:
    """Valid JSON Schema instance with no key twice (``json.loads`` would hide a repeat)."""
    cls = jsonschema.validators.validator_for(schema)
    return len(set(keys)) == len(keys) and cls(schema).is_valid(json.loads(text))


def _checked(grammar) -> int:
    """How many objects the matcher checks at runtime."""
    return 0 if grammar.unique is None else len(grammar.unique.specs)


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_every_arrangement_of_member_slots(tiny_vocab, name):
    """Every arrangement of up to 4 member slots from named and extra keys, repeats included:
    the matcher accepts exactly the valid objects."""
    schema = SCHEMAS[name]
    grammar = compile_grammar(tiny_vocab, "json_schema", schema, key_order="any")
    assert _checked(grammar) == 1 and len(grammar.lark.splitlines()) < 8  # linear: no subset states
    for n in range(5):
        for keys in itertools.product("abcxy", repeat=n):
            text = "{" + ",".join(f'"{k}":{VALUES[k]}' for k in keys) + "}"
            assert grammar.matches(text) == _valid(schema, text, list(keys)), text


def test_duplicates_under_other_spellings(tiny_vocab):
    """Keys compare decoded; extra keys are plain strings, never a named key's escape."""
    grammar = compile_grammar(tiny_vocab, "json_schema", SCHEMAS["extras"], key_order="any")
    assert grammar.matches('{"x":1,"a":2,"xy":3}')
    assert not grammar.matches('{"x":1,"a":2,"x":3}')
    assert not grammar.matches('{"\\u0061":1}')  # the extra keys are plain: no escape is generated


def test_twelve_members_in_any_order(tiny_vocab):
    grammar = compile_grammar(tiny_vocab, "json_schema", TWELVE, key_order="any")
    assert _checked(grammar) == 1
    rng = random.Random(0)
    names = [f"k{i}" for i in range(12)]
    for _ in range(20):
        keys = rng.sample(names, rng.randint(4, 12))
        text = "{" + ",".join(f'"{k}":{i}' for i, k in enumerate(keys)) + "}"
        assert grammar.matches(text) == _valid(TWELVE, text, keys), text
    every = "{" + ",".join(f'"{k}":1' for k in reversed(names)) + "}"
    assert grammar.matches(every) and not grammar.matches(every[:-1] + ',"k5":2}')


@pytest.mark.parametrize("text,ok", [
    ('{"inner":{"c":"x","b":true}}', True), ('{"list":[{"q":1,"p":2},{"q":3}],"inner":{"b":false}}', True),
    ('{"inner":{"b":true,"b":false}}', False), ('{"inner":{"c":"x"}}', False),
    ('{"list":[{"p":1}],"inner":{"b":true}}', False), ('{"list":[{"q":1,"q":1}],"inner":{"b":true}}', False),
    ('{"inner":{"b":true},"inner":{"b":true}}', False), ('{"list":[]}', False),
])
def test_nested_objects(tiny_vocab, text, ok):
    grammar = compile_grammar(tiny_vocab, "json_schema", NESTED, key_order="any")
    assert _checked(grammar) == 3 and grammar.matches(text) == ok


def test_ambiguous_paths_keep_the_grammar_construction(tiny_vocab):
    """anyOf branches at one path that one check cannot tell apart (the keys that satisfy one
    branch's check can parse under the other's grammar): the subset-state grammar, any order."""
    grammar = compile_grammar(tiny_vocab, "json_schema", AMBIGUOUS, key_order="any")
    assert _checked(grammar) == 0
    for text, ok in [('{"b":1,"a":2}', True), ('{"a":true,"c":2}', True), ('{"a":1,"a":2}', False),
                     ('{"a":true}', False), ('{"a":1}', False), ('{"c":1,"a":true,"b":2}', False),
                     ('{"c":1,"a":true,"b":false,"x":3}', True), ('{"a":true,"b":true}', False)]:
        assert grammar.matches(text) == ok, text


def test_tool_call_grammars_keep_the_grammar_construction():
    """Consumers without the runtime check (tool-call ebnf) keep members exact in the grammar."""
    out = schema_to_grammar(SCHEMAS["required-a"], unspecified_extras=False)
    assert out.unique is None and "memb" not in out.lark
    assert schema_to_grammar(SCHEMAS["required-a"], unique_runtime=True).unique is not None


def test_rollback_copy_validate_and_completion(tiny_vocab):
    grammar = compile_grammar(tiny_vocab, "json_schema", SCHEMAS["required-a"], key_order="any")
    ids = grammar.vocab.llg.tokenize_str('{"b":true,"c":"x"')
    m = grammar.matcher()
    assert all(m.accept_token(t) for t in ids)
    fork = m.copy()
    dup = grammar.vocab.llg.tokenize_str(',"b":false}')
    assert m.validate_tokens(dup) < len(dup)
    close = grammar.vocab.llg.tokenize_str("}")
    assert not m.accept_token(close[0])  # "a" is required
    done = m.completion()
    assert done is not None and _valid(SCHEMAS["required-a"], '{"b":true,"c":"x"' + done, ["b", "c", "a"])
    m.rollback(len(ids))  # back to the start
    assert all(m.accept_token(t) for t in grammar.vocab.llg.tokenize_str('{"a":1}')) and m.is_accepting()
    assert all(fork.accept_token(t) for t in grammar.vocab.llg.tokenize_str(',"a":2}')) and fork.is_accepting()


MASKED = [
    pytest.param(SCHEMAS["max-2"], ['{"b":true,"c":"x"}', '{"c":"a,\\"}","a":1}', '{"zz":1,"c":"c"}'],
                 marks=pytest.mark.slow),  # ~26 s: every step's mask at 152k tokens checks each key
    (NESTED, ['{"list":[{"q":1,"p":2},{"q":3}],"inner":{"c":"b\\"","b":true}}']),
    (SCHEMAS["extras"], ['{"x":1,"a":2,"xy":3,"b":false}']),
]


@pytest.mark.parametrize("schema,texts", MASKED, ids=["max-2", "nested", "extras"])
def test_masks_equal_accept_token(real, schema, texts):
    """At every prefix of the texts and sampled prefixes of walks: every token the core allows
    and the check removes is rejected by ``accept_token``; every allowed token is accepted
    (past 2,000 of them: those holding a structural byte, and a sample)."""
    tokenizer, vocab = real
    grammar = compile_grammar(vocab, "json_schema", schema, key_order="any")
    assert _checked(grammar) >= 1
    plain = CompiledGrammar(vocab, grammar.lark, "json_schema", schema)  # the same grammar, unchecked
    rng = random.Random(0)
    row = torch.zeros(vocab.mask_words, dtype=torch.int32)
    structural = np.zeros(vocab.mask_words * 32, dtype=bool)
    structural[[t for t, b in enumerate(vocab.token_bytes) if b and any(c in b for c in b'",}{')]] = True
    paths = [tokenizer.encode(t) for t in texts]
    for seed in range(3):
        walk = random_walk(grammar, random.Random(seed), max_tokens=40)
        assert walk is not None
        paths.append(walk[0])
    for i, ids in enumerate(paths):
        m, p = grammar.matcher(), plain.matcher()
        for n in range(len(ids) + 1):
            if n and not (m.accept_token(ids[n - 1]) and p.accept_token(ids[n - 1])):
                raise AssertionError(f"prefix {n} of {ids} rejected")
            if i >= len(texts) and rng.random() > 0.3:
                continue
            shared.assert_masks_agree(m, p, row, rng, structural)


def test_memo_masks_equal_fresh_ones(real, monkeypatch):
    """``member_mask``'s per-state memo: where a state comes back (inside string values, in each
    item of a list), its mask equals the one computed from nothing, bit for bit, and so does the
    mask under a memo that evicts at every step."""
    from radixlm.constrained.masks import member_memo

    tokenizer, vocab = real
    grammar = compile_grammar(vocab, "json_schema", NESTED, key_order="any")
    texts = ['{"list":[{"q":1,"p":2},{"q":3},{"p":44,"q":5}],"inner":{"c":"a long, long \\"value\\"","b":true}}',
             '{"inner":{"b":false,"a":7},"list":[{"q":12}]}']
    walks = [random_walk(grammar, random.Random(seed), max_tokens=60)[0] for seed in range(2)]
    row = torch.zeros(vocab.mask_words, dtype=torch.int32)

    def masks() -> list[np.ndarray]:
        out = []
        for ids in [tokenizer.encode(t) for t in texts] + walks:
            m = grammar.matcher()
            for t in ids + [None]:
                m.fill_mask(row)
                out.append(row.numpy().copy())
                if t is not None:
                    assert m.accept_token(t)
        return out

    member_memo.memos.clear()
    warm = masks()
    entries = len(member_memo.memo_for(grammar.unique_tracker).entries)
    assert entries < len(warm) / 2, (entries, len(warm))  # the states did come back
    monkeypatch.setattr(member_memo, "MEMO_STATES", 1)
    assert all(np.array_equal(a, b) for a, b in zip(warm, masks(), strict=True))
    member_memo.memos.clear()
    fresh = []
    for ids in [tokenizer.encode(t) for t in texts] + walks:
        m = grammar.matcher()
        for t in ids + [None]:
            member_memo.memos.clear()
            m.fill_mask(row)
            fresh.append(row.numpy().copy())
            if t is not None:
                assert m.accept_token(t)
    assert all(np.array_equal(a, b) for a, b in zip(warm, fresh, strict=True))


def test_memo_inside_a_unique_array_of_a_checked_object(tiny_vocab):
    """A unique array open inside a checked object (its frame is not the object's): masks with
    the memo equal fresh ones and keep the array's items and the object's keys unique."""
    from radixlm.constrained.masks import member_memo

    schema = {"type": "object", "additionalProperties": False, "required": ["n"], "properties": {
        "tags": {"type": "array", "items": STR, "uniqueItems": True}, "n": INT}}
    grammar = compile_grammar(tiny_vocab, "json_schema", schema, key_order="any")
    assert _checked(grammar) >= 1
    ids = grammar.vocab.llg.tokenize_str('{"tags":["a","b","ab"],"n":1}')
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    m = grammar.matcher()
    for t in ids:
        m.fill_mask(row)
        warm = row.numpy().copy()
        member_memo.memos.clear()
        m.fill_mask(row)
        assert np.array_equal(warm, row.numpy())
        assert m.accept_token(t)
    assert m.is_accepting()
    assert_walks_validate(grammar, 60)


@pytest.mark.parametrize("schema", list(SCHEMAS.values()) + [TWELVE, NESTED], ids=list(SCHEMAS) + ["twelve", "nested"])
def test_random_walks_validate(tiny_vocab, schema):
    """Walks sampled from the masks validate and never repeat a key."""
    assert_walks_validate(compile_grammar(tiny_vocab, "json_schema", schema, key_order="any"), 60)


def assert_walks_validate(grammar, max_tokens: int) -> None:
    """Six walks sampled from the masks finish, validate and never repeat a key."""
    for seed in range(6):
        walk = random_walk(grammar, random.Random(seed), max_tokens=max_tokens)
        assert walk is not None, seed
        text = bytes(b for t in walk[0] for b in grammar.vocab.token_bytes[t]).decode("utf-8")
        assert not grammar.validate_output(text), text
        json.loads(text, object_pairs_hook=_no_repeats)


def _no_repeats(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    assert len(set(keys)) == len(keys), keys
    return dict(pairs)


def test_compact_output_of_the_twelve(tiny_vocab):
    value = {f"k{i}": i for i in reversed(range(12))}
    assert compile_grammar(tiny_vocab, "json_schema", TWELVE, key_order="any").matches(compact_json(value))


def test_forced_text_follows_the_check(tiny_vocab):
    """Jump-forward text: the only key that may come (and ``,``/``}`` where the check leaves one)."""
    grammar = compile_grammar(tiny_vocab, "json_schema", SCHEMAS["required-a"], key_order="any")
    m = grammar.matcher()
    assert m.forced_continuation() == '{"'  # "}" is refused: "a" is required
    assert all(m.accept_token(t) for t in grammar.vocab.llg.tokenize_str('{"b":true,"c":"x"'))
    assert m.forced_continuation() == ',"a":'
    assert all(m.accept_token(t) for t in grammar.vocab.llg.tokenize_str(',"a":1'))
    assert m.forced_continuation() == ""  # more digits may come
