"""Compile-time warm-up (``constrained/backend.py``'s ``warm_start``): a compiled grammar computes the masks along
the opening of its shortest documents, so the first request meets those states built. It fills
caches and nothing else: every mask is the same with it or without it, along any walk. It is
bounded (masks, seconds), and the member check's states along it are filed as whole entries."""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
import torch
from radixlm.constrained import backend, compile_grammar
from radixlm.constrained.backend import build_grammar as CompiledGrammar
from radixlm.constrained.backend import constraint_grammar
from radixlm.constrained.compile.worker import CompileRequest
from radixlm.constrained.decoding.completion import greedy_completion, opening_bytes
from radixlm.constrained.masks.member_memo import MemoEntry, memo_for, memo_key
from radixlm.constrained.masks.members import FirstVisit
from radixlm.constrained.vocab import TokenizerVocab

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

INT, STR = {"type": "integer"}, {"type": "string"}
CHECKED = {"type": "object", "properties": {"name": STR, "age": INT, "tags": {"type": "array", "items": STR}},
           "required": ["name", "age"]}
CLOSED = {"type": "object", "properties": {"nick": INT, "nickname": STR, "nice": INT, "zeta": STR},
          "required": ["zeta"], "additionalProperties": False}
SCHEMAS = {
    "checked": CHECKED,
    "closed": CLOSED,
    "unique items": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True, "minItems": 2},
    "counted string": {"type": "object", "properties": {"s": {"type": "string", "minLength": 3, "maxLength": 40}},
                       "required": ["s"]},
    "nested": {"type": "object", "properties": {"inner": CLOSED, "list": {"type": "array", "items": CHECKED}},
               "required": ["inner", "list"]},
}


@pytest.fixture(autouse=True)
def check_every_object(monkeypatch):
    """Small objects are checked at runtime too (by default they keep any-order rules)."""
    monkeypatch.setattr("radixlm.constrained.json_schema.objects.RUNTIME_CHECK_ABOVE", -1)


@pytest.fixture(autouse=True)
def budget_in_masks_alone(monkeypatch):
    """The warm-up's wall-time budget never binds here (counts, not timing: a busy machine must
    not change what these tests see); the test of the time bound sets it to zero itself."""
    monkeypatch.setattr(backend, "WARM_SECONDS", 60.0)


def _compiled(vocab: TokenizerVocab, schema: dict, warm: bool, key_order: str = "schema") -> CompiledGrammar:
    parts = constraint_grammar(CompileRequest("json_schema", schema, None, True, key_order))
    return CompiledGrammar(vocab, parts.lark, "json_schema", schema, parts.relaxed, parts.notes, parts.unique,
                           warm=warm)


def _row(grammar: CompiledGrammar, matcher) -> np.ndarray:
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    matcher.fill_mask(row)
    return row.numpy().copy()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_masks_are_the_same_with_and_without_it(vocab, name):
    """Random walks through a warmed and a cold grammar of the same schema see the same mask at
    every step, and the warm-up computed masks past the start."""
    cold, warm = _compiled(vocab, SCHEMAS[name], False), _compiled(vocab, SCHEMAS[name], True)
    assert backend.warm_start(_compiled(vocab, SCHEMAS[name], False)) > 1
    for seed in range(3):
        rng, a, b = random.Random(seed), cold.matcher(), warm.matcher()
        for _ in range(60):
            if a.is_terminated():
                break
            mask = _row(cold, a)
            assert np.array_equal(mask, _row(warm, b)), (name, seed, a.accepted_bytes())
            allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little"))
            token = int(allowed[rng.randrange(len(allowed))])
            assert a.accept_token(token) and b.accept_token(token)


@pytest.mark.parametrize("name", ["checked", "closed", "nested"])
def test_member_states_along_it_are_whole_entries(vocab, name):
    """The member check's states on the warm-up's path are filed as whole entries (a request's
    first mask there is a memo hit), none as a first visit's record."""
    grammar = _compiled(vocab, SCHEMAS[name], True, "any")  # runtime-checked members: any order only
    tracker = grammar.unique_tracker
    entries = memo_for(tracker).entries
    assert entries and not any(type(e) is FirstVisit for e in entries.values())
    text = opening_bytes(grammar.matcher(), backend.WARM_BYTES, 1.0)
    state = tracker.initial
    for token in vocab.encode(text.decode())[:3]:  # the first states a request meets
        assert type(entries.get(memo_key(tracker, state)[0])) is MemoEntry, state
        state = tracker.feed(state, vocab.token_bytes[token])


def test_bounded_by_masks_and_time(vocab, monkeypatch):
    grammar = _compiled(vocab, SCHEMAS["nested"], False)
    monkeypatch.setattr(backend, "WARM_MASKS", 3)
    assert backend.warm_start(grammar) == 3
    monkeypatch.setattr(backend, "WARM_MASKS", 64)
    monkeypatch.setattr(backend, "WARM_SECONDS", 0.0)  # the search ends at once: the start alone
    assert backend.warm_start(grammar) == 1


def test_opening_bytes_ends_where_the_document_does(vocab):
    """Within its budget, ``opening_bytes`` is a whole valid document of the shortest kind; past it,
    a valid prefix (where the completion search finds none)."""
    grammar = compile_grammar(vocab, "json_schema", SCHEMAS["nested"])
    data = opening_bytes(grammar.matcher(), 256, 1.0)
    jsonschema.validate(json.loads(data), SCHEMAS["nested"])
    long = compile_grammar(vocab, "regex", "[ab]{300}c")  # no byte forced: one chosen at a time
    assert greedy_completion(long.matcher(), 256) is None
    prefix = opening_bytes(long.matcher(), 256, 1.0)
    assert len(prefix) == 256 and set(prefix) <= set(b"ab")
    assert backend.warm_start(long) > 1  # a prefix is enough to warm


def test_string_values_get_one_character_where_they_may(vocab):
    """``fill``: each string value is given the fill byte first, so the warm-up masks inside a
    string too; where the value refuses it (a pattern, an enum) the search goes on as without it."""
    schema = {"type": "object", "required": ["s", "n", "e"],
              "properties": {"s": STR, "n": {"type": "string", "pattern": "^[0-9]+$"}, "e": {"enum": ["xy", "z"]}}}
    grammar = compile_grammar(vocab, "json_schema", schema)
    plain = json.loads(opening_bytes(grammar.matcher(), 256, 1.0))
    filled = json.loads(opening_bytes(grammar.matcher(), 256, 1.0, fill=ord("a")))
    jsonschema.validate(filled, schema)
    assert plain["s"] == "" and filled["s"] == "a"
    assert filled["n"] == plain["n"] and filled["e"] == plain["e"]


def test_text_without_tokens_warms_the_start_alone(monkeypatch):
    """An opening the vocabulary cannot spell (a byte without a token, and no encoder): the
    warm-up masks the start alone and the compile succeeds."""
    tokens = [bytes([c]) for c in b'{}[],:"0123456789'] + [b"tru", b"e"]  # no "a", no "s"
    vocab = TokenizerVocab.from_token_bytes(tokens + [None], [len(tokens)])
    schema = {"type": "object", "properties": {"s": STR}, "required": ["s"]}
    monkeypatch.setattr(backend, "opening_bytes", lambda *args, **kwargs: b'{"s":"a"}')
    assert backend._tokens(vocab, b'{"s":"a"}') == []
    assert backend.warm_start(_compiled(vocab, schema, False)) == 1
    _compiled(vocab, schema, True)  # raises if the warm-up fails the compile
