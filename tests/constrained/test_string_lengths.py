"""Counted strings (``json_schema/unique.py``, ``string_count.py``,
``string_length_mask.py``): plain strings with ``minLength``/``maxLength`` get the unbounded
lexeme where the path automaton locates them, and the matcher counts their code points.

Every walk checks the mask bit by bit against ``accept_token`` on every token of a vocabulary
made to cross string boundaries (tokens that open, close, or close and open strings, escapes,
split UTF-8), and every finished output against ``jsonschema``.
"""

from __future__ import annotations

import json
import random

import pytest
import torch
from radixlm.constrained import compile_grammar
from radixlm.constrained.checks.reader import G_VAL
from radixlm.constrained.checks.tracker import chars_until_close, read_counted
from radixlm.constrained.json_schema.compiler import schema_to_grammar
from radixlm.constrained.masks.member_memo import memo_key
from radixlm.constrained.masks.string_lengths import _FIRST, ESCAPES, LengthTables
from radixlm.constrained.testing.walks import allowed_ids
from radixlm.constrained.vocab import TokenizerVocab

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

PIECES = [b'"ab', b'"abcdef', b':"', b':"abc', b'","', b'""', b'":""', b'":"', b'abc"', b'abcdefgh',
          b'\\u00e9', b'\\n', b'\xc3\xa9', b'\xc3', b'\xa9', b'",', b'"}', b'"]', b',"', b'["', b'[""]',
          b'xy",', b'\\"', b'00', b'e9', b'\\u', b'",""', b'":"abcd', b'1,"ab', b'"x"', b'ab"}']
ALPHABET = b'{}[],:"\\ 0123456789abcdefghijklmnopqrstuvwxyz\n'
BOUNDED = {"type": "string", "minLength": 2, "maxLength": 4}
OBJECT = {"type": "object", "properties": {"a": BOUNDED, "b": {"type": "integer"}, "c": {
    "type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 3}}}, "required": ["a", "c"]}
EXTRAS = {"type": "object", "properties": {"k": {"type": "string", "maxLength": 2}, "m": {"type": "string"}},
          "additionalProperties": {"type": "string", "maxLength": 1}}
ITEMS = {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string", "minLength": 1, "maxLength": 2}},
                                    "required": ["n"]}, "maxItems": 3}
EXACT = {"type": "string", "minLength": 3, "maxLength": 3}


@pytest.fixture(scope="module")
def vocab() -> TokenizerVocab:
    tokens = [bytes([c]) for c in ALPHABET] + PIECES
    return TokenizerVocab.from_token_bytes(tokens + [None], [len(tokens)])


def _counted(schema: dict) -> tuple:
    out = schema_to_grammar(schema, unique_runtime=True)
    return out.unique.strings if out.unique is not None else (), out.grammar.to_lark()


@pytest.mark.parametrize("schema,bounds", [
    (BOUNDED, [(2, 4)]),
    ({"type": "array", "items": BOUNDED}, [(2, 4)]),
    (OBJECT, [(2, 4), (1, 3)]),
    (EXTRAS, [(0, 1), (0, 2)]),
    ({"type": "string", "minLength": 5}, [(5, None)]),
])
def test_located_strings_are_counted_at_runtime(schema, bounds):
    strings, lark = _counted(schema)
    assert sorted((b for b in strings if b is not None), key=str) == sorted(bounds, key=str)
    assert "{2,4}" not in lark and "{0,1}" not in lark and "{5,}" not in lark  # the lexer no longer counts


@pytest.mark.parametrize("schema", [
    {"anyOf": [{"type": "string", "maxLength": 3}, {"const": "hello"}]},  # another string at the path
    {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "string", "minLength": 9}]},  # two counts
    {"type": "object", "propertyNames": {"maxLength": 3}},  # a key: the tracker does not count keys
])
def test_strings_the_automaton_cannot_tell_apart_keep_their_bounds_in_the_grammar(schema):
    strings, lark = _counted(schema)
    assert not any(strings)
    assert "{0,3}" in lark


def test_a_unique_array_of_counted_strings_still_bounds_them(vocab):
    schema = {"type": "array", "items": {"type": "string", "maxLength": 3}, "uniqueItems": True}
    grammar = compile_grammar(vocab, "json_schema", schema)
    assert grammar.matches('["abc"]') and grammar.matches('["\\u00e9\\n"]')
    assert not grammar.matches('["abcd"]')


def test_reading_counts_code_points_escapes_and_utf8_as_one():
    assert read_counted(b'ab\\n\\u00e9\xc3\xa9"x', 0, 0, 0) == (0, 5, 13, True)
    assert read_counted(b'\xa9ab', 0, 0, 1) == (0, 3, 3, False)  # a continuation byte: counted already
    assert read_counted(b'00e9"', 0, 3, 0) == (0, 1, 5, True)  # two hex digits were still due
    assert read_counted(b'"', 0, -1, 2) == (0, 2, 1, False)  # an escaped quote does not close


def _walk(grammar, vocab, rng, steps: int):
    """A random walk; at every step the mask equals ``accept_token`` on every token."""
    m, row, n = grammar.matcher(), torch.zeros(vocab.mask_words, dtype=torch.int32), len(vocab.token_bytes)
    for _ in range(steps):
        if m.is_terminated():
            break
        m.fill_mask(row)
        allowed = set(allowed_ids(row).tolist())
        for t in range(n):
            assert m.copy().accept_token(t) == (t in allowed), (t, vocab.token_bytes[t], m.accepted_bytes())
        assert allowed, m.accepted_bytes()
        assert m.accept_token(rng.choice(sorted(allowed)))
    return m


@pytest.mark.parametrize("schema", [OBJECT, EXTRAS, ITEMS, EXACT, {"type": "array", "items": BOUNDED}])
@pytest.mark.parametrize("checked", [False, True])
def test_masks_equal_accept_token_and_outputs_validate(vocab, monkeypatch, schema, checked):
    if checked:  # every object checked at runtime too: the member check feeds inside counted strings
        monkeypatch.setattr("radixlm.constrained.json_schema.objects.RUNTIME_CHECK_ABOVE", -1)
    grammar = compile_grammar(vocab, "json_schema", schema)
    assert any(grammar.unique.strings)
    for seed in range(12):
        m = _walk(grammar, vocab, random.Random(seed), 24)
        close = m.completion_bytes()
        assert close is not None
        assert all(m.accept_token(vocab.byte_tokens[b]) for b in close)
        text = m.accepted_bytes().decode()
        assert grammar.validate_output(text) == [], text


@pytest.mark.parametrize("text,ok", [
    ('"' + "é\\n\\u00e9\\\"" * 1250 + '"', True),  # 5,000 characters, 4 of each kind of escape
    ('"' + "é\\n\\u00e9\\\"" * 1250 + 'x"', False),
    ('"' + "ab" * 1249 + '"', False),  # 4,998: under minLength
])
def test_long_bounds_are_exact_with_escapes(vocab, text, ok):
    grammar = compile_grammar(vocab, "json_schema", {"type": "string", "minLength": 4999, "maxLength": 5000})
    assert any(grammar.unique.strings)
    assert grammar.matches(text) == ok
    assert (4999 <= len(json.loads(text)) <= 5000) == ok  # the instances say what jsonschema would


def test_the_closing_quote_is_forced_at_max_length(vocab):
    grammar = compile_grammar(vocab, "json_schema", {"type": "object", "properties": {"a": {
        "type": "string", "maxLength": 3}}, "required": ["a"], "additionalProperties": False})
    m = grammar.matcher()
    for t in vocab.greedy_encode(b'{"a":"ab'):
        assert m.accept_token(t)
    assert m.forced_continuation() == ""
    assert m.accept_token(vocab.byte_tokens[ord("c")])
    assert m.forced_continuation() == '"}'


def test_completion_writes_the_characters_min_length_needs(vocab):
    grammar = compile_grammar(vocab, "json_schema", {"type": "array", "items": {"type": "string", "minLength": 6}})
    m = grammar.matcher()
    for t in vocab.greedy_encode(b'["ab'):
        assert m.accept_token(t)
    close = m.completion_bytes()
    text = (m.accepted_bytes() + close).decode()
    assert len(json.loads(text)[0]) >= 6, text


def test_the_member_memo_has_one_entry_for_every_count(vocab, monkeypatch):
    monkeypatch.setattr("radixlm.constrained.json_schema.objects.RUNTIME_CHECK_ABOVE", -1)
    grammar = compile_grammar(vocab, "json_schema", OBJECT)
    m, keys = grammar.matcher(), set()
    for i, b in enumerate(b'{"a":"abc'):
        assert m.accept_token(vocab.byte_tokens[b])
        if i >= 5:  # inside the string: counts 0..3
            keys.add(memo_key(grammar.unique_tracker, m._states[-1])[0])
    assert len(keys) == 1


def test_the_tables_read_every_token_as_the_tracker_does(vocab):
    tables = LengthTables(vocab)
    for esc in ESCAPES:
        counts, closes, most = tables.chars(esc)
        for t, data in enumerate(vocab.token_bytes):
            if data:
                assert (counts[t], closes[t]) == chars_until_close(data, esc), (esc, data)
        assert most == max(counts)


def test_prefixes_with_bytes_json_never_holds_outside_strings_are_not_fed():
    """``LengthTables.prefixes``: outside strings only whitespace, structure and scalars' bytes may
    come before a quote, so the prefixes it leaves out open no string from any state of a walk
    (``feed`` refuses them), and the ones with a number before the comma stay."""
    tokens = [bytes([c]) for c in ALPHABET] + PIECES + [b'@"ab', b' $("abc', b'x"ab', b' [{"a', b'[\x0c"ab']
    vocab = TokenizerVocab.from_token_bytes(tokens + [None], [len(tokens)])
    tables = LengthTables(vocab)
    assert b"1," in tables.prefixes(G_VAL)  # a number, then a comma, then the quote
    assert b"[\x0c" in tables.prefixes(G_VAL)  # the tracker reads a form feed as whitespace
    grammar = compile_grammar(vocab, "json_schema", OBJECT)
    tracker, checked = grammar.unique_tracker, 0
    for seed in range(4):
        rng, matcher = random.Random(seed), grammar.matcher()
        for _ in range(40):
            state = matcher._states[-1]
            if state[1] in _FIRST:
                left_out = set(tables.groups) - set(tables.prefixes(state[1]))
                assert {b"@", b" $("} <= left_out
                for prefix in left_out:
                    assert tracker.feed(state, prefix + b'"', lengths=False) is None, (state, prefix)
                checked += 1
            row = torch.zeros(vocab.mask_words, dtype=torch.int32)
            matcher.fill_mask(row)
            allowed = allowed_ids(row)
            if matcher.is_terminated() or not len(allowed):
                break
            assert matcher.accept_token(int(allowed[rng.randrange(len(allowed))]))
    assert checked > 10
