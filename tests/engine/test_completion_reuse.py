"""``LastCompletion``: the last completion carried forward (whole, or less what the model wrote of
it), returned only when it still ends the document from the matcher's state."""

from __future__ import annotations

import json

import pytest
from radixlm.constrained import TokenizerVocab, compile_grammar
from radixlm.runtime.engine.constraints import LastCompletion, _cuts
from radixlm.runtime.tokenizer.tokenizer import Tokenizer

pytestmark = pytest.mark.unit

SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"},
                                           "c": {"type": "boolean"}},
          "required": ["a", "b", "c"], "additionalProperties": False}


@pytest.fixture(scope="module")
def tokenizer(tiny_llama):
    return Tokenizer(tiny_llama)


@pytest.fixture(scope="module")
def grammar(tokenizer):
    return compile_grammar(TokenizerVocab.from_tokenizer(tokenizer), "json_schema", SCHEMA)


def walk(grammar, tokenizer, text: str):
    matcher = grammar.matcher()
    for token in tokenizer.encode(text, add_special_tokens=False):
        assert matcher.accept_token(token)
    return matcher


def feed(matcher, tokenizer, text: str) -> None:
    for token in tokenizer.encode(text, add_special_tokens=False):
        assert matcher.accept_token(token)


def completes(matcher, tokenizer, ids) -> bool:
    text = matcher.accepted_bytes() + tokenizer.decode(ids, skip_special_tokens=False).encode()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return False
    return set(doc) == {"a", "b", "c"}


def test_cuts_try_the_overlaps_longest_first_then_the_whole():
    assert _cuts(b'xy"', b'","b":0}') == [1, 0]
    assert _cuts(b'"b":', b'"b":0}') == [4, 0]
    assert _cuts(b"12", b',"c":true}') == [0]


@pytest.mark.parametrize("start, written", [
    ('{"a":"he', "llo there"),  # inside a string: the completion carries over whole
    ('{"a":"he', 'y",'),  # the string closed and the comma written: the rest of it
    ('{"a":"x","b":', "12"),  # a number grows: still closed by the same text
])
def test_a_carried_completion_still_ends_the_document(grammar, tokenizer, start, written):
    matcher = walk(grammar, tokenizer, start)
    last = LastCompletion(matcher, tokenizer)
    last.remember(matcher.completion_bytes())
    feed(matcher, tokenizer, written)
    ids = last.tokens()
    assert ids is not None and last.hits == 1
    assert completes(matcher, tokenizer, ids)


def test_none_when_the_text_left_the_completion_behind(grammar, tokenizer):
    matcher = walk(grammar, tokenizer, '{"a":"x","b":1,"c":')
    last = LastCompletion(matcher, tokenizer)
    last.remember(matcher.completion_bytes())  # a boolean: "true" or "false" then "}"
    data = last._data
    feed(matcher, tokenizer, "false" if data.startswith(b"t") else "true")
    assert data.endswith(b"}") and last.tokens() is None and last.hits == 0  # the other literal then "}"


def test_nothing_to_carry_after_a_rollback_or_without_a_completion(grammar, tokenizer):
    matcher = walk(grammar, tokenizer, '{"a":"hello')
    last = LastCompletion(matcher, tokenizer)
    assert last.tokens() is None
    last.remember(matcher.completion_bytes())
    matcher.rollback(1)
    assert last.tokens() is None
