"""GrammarMatcher, GrammarBackend and jump-forward: a 3-token toy vocabulary for the cursor rules,
the tiny checkpoint's tokenizer for masks over a real vocabulary and for jump-forward."""

from __future__ import annotations

import random

import pytest
import torch
from radixlm.constrained import (
    ConstraintError,
    GrammarBackend,
    TokenizerVocab,
    compile_grammar,
    jump_forward,
)
from radixlm.constrained.testing.walks import allowed_tokens, random_walk
from radixlm.runtime.sampling_params import SamplingParams

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

A, B, AB, EOS, PAD = 0, 1, 2, 3, 4


@pytest.fixture(scope="module")
def toy():
    """Tokens "a", "b", "ab"; EOS 3; a special token 4; logits 40 wide (two mask words)."""
    return TokenizerVocab.from_token_bytes([b"a", b"b", b"ab", None, None], [EOS], vocab_size=40)


def vocab_ids(vocab, text: str) -> list[int]:
    """``text`` as single-byte tokens (the tiny tokenizer would add a word-start marker)."""
    return [vocab.byte_tokens[b] for b in text.encode()]


def _mask(m, vocab):
    row = torch.full((vocab.mask_words,), -1, dtype=torch.int32)  # garbage that must be cleared
    return set(allowed_tokens(m, row))


def test_toy_mask_accept_and_eos(toy):
    m = compile_grammar(toy, "regex", "(ab)+").matcher()
    assert _mask(m, toy) == {A, AB}  # no EOS before a complete match, nothing past the vocab
    assert not m.accept_token(B) and not m.accept_token(EOS) and not m.accept_token(39)
    assert m.num_accepted == 0 and _mask(m, toy) == {A, AB}  # rejections change nothing
    assert m.accept_token(A) and _mask(m, toy) == {B}
    assert m.accept_token(B) and _mask(m, toy) == {A, AB, EOS}
    assert m.is_accepting() and not m.is_terminated()
    assert m.accept_token(EOS) and m.is_terminated() and not m.accept_token(A)


def test_toy_rollback_and_copy(toy):
    m = compile_grammar(toy, "regex", "(ab)+").matcher()
    for t in (AB, A, B, EOS):
        assert m.accept_token(t)
    fork = m.copy()
    m.rollback(2)  # undo EOS and "b"
    assert not m.is_terminated() and _mask(m, toy) == {B}
    assert fork.is_terminated() and fork.num_accepted == 4
    m.rollback(2)
    assert m.num_accepted == 0 and _mask(m, toy) == {A, AB}
    with pytest.raises(ValueError, match="roll back 1"):
        m.rollback(1)
    for _ in range(50):  # longer than outlines' own rollback window: replays from the start
        assert m.accept_token(AB)
    m.rollback(45)
    assert m.num_accepted == 5 and m.accept_token(A) and _mask(m, toy) == {B}


def test_toy_terminates_when_only_eos_can_follow(toy):
    m = compile_grammar(toy, "choices", ["ab", "a"]).matcher()
    assert m.accept_token(A) and m.is_accepting() and not m.is_terminated()
    assert m.accept_token(B) and m.is_terminated()  # "ab" cannot be extended


def test_fill_mask_checks_the_row(toy):
    m = compile_grammar(toy, "regex", "a").matcher()
    with pytest.raises(ValueError, match="2 elements"):
        m.fill_mask(torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match="int32"):
        m.fill_mask(torch.zeros(2, dtype=torch.int64))


def test_vocab_validation():
    with pytest.raises(ValueError, match="eos_token_ids"):
        TokenizerVocab.from_token_bytes([b"a"], [])
    with pytest.raises(ValueError, match="smaller"):
        TokenizerVocab.from_token_bytes([b"a", None, None], [1], vocab_size=2)


def test_real_vocab_masks_cover_multiple_eos_and_extra_width(tokenizer):
    vocab = TokenizerVocab.from_tokenizer(tokenizer, vocab_size=tokenizer.vocab_size + 64)
    m = compile_grammar(vocab, "choices", ["yes", "no"]).matcher()
    allowed = _mask(m, vocab)
    assert allowed and max(allowed) < tokenizer.vocab_size
    assert all(tokenizer.decode([t]) and ("yes".startswith(tokenizer.decode([t]))
               or "no".startswith(tokenizer.decode([t]))) for t in allowed)
    for t in tokenizer.encode("yes"):
        assert m.accept_token(t)
    assert set(tokenizer.eos_token_ids) <= _mask(m, vocab)


def test_forced_continuation(vocab):
    g = compile_grammar(vocab, "json_schema", {"type": "object", "properties": {"name": {"type": "string"}},
                                               "required": ["name"], "additionalProperties": False})
    m = g.matcher()
    assert m.forced_continuation() == '{"name":"'
    for t in vocab_ids(vocab, '{"name":"x'):
        assert m.accept_token(t)
    assert m.forced_continuation() == ""  # more string, or its end: nothing forced
    assert m.accept_token(vocab_ids(vocab, '"')[0])
    assert m.forced_continuation() == "}"


def test_jump_forward_splices_a_faithful_tokenisation(tokenizer, vocab):
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "status": {"enum": ["active"]}},
              "required": ["id", "status"], "additionalProperties": False}
    m = compile_grammar(vocab, "json_schema", schema, key_order="any").matcher()
    out: list[int] = []
    jf = jump_forward(m, tokenizer, out)
    assert jf is not None and jf.num_drop == 0 and jf.text == '{"'  # members come in any order
    out += jf.new_ids
    for t in jf.new_ids:
        assert m.accept_token(t)
    assert m.accept_token(vocab.byte_tokens[ord("i")])  # "i": the rest of the key is forced
    out.append(vocab.byte_tokens[ord("i")])
    jf = jump_forward(m, tokenizer, out)
    assert jf is not None and jf.text == 'd":'
    m.rollback(jf.num_drop)
    out = out[: len(out) - jf.num_drop] + jf.new_ids
    for t in jf.new_ids:
        assert m.accept_token(t)
    for t in tokenizer.encode("42"):
        assert m.accept_token(t)
        out.append(t)
    m_before = m.num_accepted
    assert jump_forward(m, tokenizer, out) is None  # "42" may continue: nothing forced
    assert m.num_accepted == m_before  # jump_forward never moves the matcher
    assert m.accept_token(tokenizer.encode(",")[0])
    out.append(tokenizer.encode(",")[0])
    jf = jump_forward(m, tokenizer, out)
    assert jf.text == '"status":"active"}'
    m.rollback(jf.num_drop)
    out = out[: len(out) - jf.num_drop] + jf.new_ids
    for t in jf.new_ids:
        assert m.accept_token(t)
    text = tokenizer.decode(out)
    assert text == '{"id":42,"status":"active"}' and m.is_terminated()
    tail = tokenizer.encode(text)[-len(jf.new_ids):]
    assert tail == jf.new_ids  # the same ids a fresh tokenisation gives


def test_random_walks_with_jump_forward_need_fewer_steps(vocab, tokenizer):
    schema = {"type": "object", "properties": {"kind": {"const": "point"}, "x": {"type": "integer"},
                                               "tags": {"type": "array", "items": {"enum": ["red", "green"]}}},
              "required": ["kind", "x", "tags"], "additionalProperties": False}
    g = compile_grammar(vocab, "json_schema", schema)
    plain = jumped = 0
    for seed in range(4):
        ids, steps = random_walk(g, random.Random(seed), 80)
        assert g.validate_output(tokenizer.decode(ids)) == []
        ids, jsteps = random_walk(g, random.Random(seed), 80, tokenizer, jump=True)
        assert g.validate_output(tokenizer.decode(ids)) == []
        plain, jumped = plain + steps, jumped + jsteps
    assert jumped < plain


def test_backend_compiles_caches_and_fails_per_request(vocab):
    backend = GrammarBackend(vocab, compile_timeout_s=5.0, cache_size=2)
    try:
        params = SamplingParams(json_schema={"type": "integer"})
        g1 = backend.submit(params).result(timeout=30)
        assert backend.submit(SamplingParams(json_schema='{"type": "integer"}')).result() is g1
        assert backend.stats["hits"] == 1
        bad = backend.submit(SamplingParams(json_schema={"type": "array", "uniqueItems": True, "minItems": 2,
                                                                "items": {"type": "object"}}))
        with pytest.raises(ConstraintError, match="#/uniqueItems"):
            bad.result(timeout=30)
        lenient = backend.submit(SamplingParams(json_schema={"type": "integer", "not": {"multipleOf": 2}},
                                                strict=False))
        assert lenient.result(timeout=30).relaxed == ["#/not"]
        with pytest.raises(ConstraintError, match="regex"):
            backend.submit(SamplingParams(regex="(unclosed")).result(timeout=30)
        obj = backend.submit(SamplingParams(json_object=True)).result(timeout=60)
        assert obj.matches('{"a":[1,"x"],"b":{"c":null}}') and not obj.matches("[1]")
        choice = backend.submit(SamplingParams(choices=["a.b", "a"])).result(timeout=30)
        assert choice.matches("a.b") and choice.matches("a") and not choice.matches("axb")
        with pytest.raises(ValueError, match="no constraint"):
            backend.submit(SamplingParams())
    finally:
        backend.shutdown()


def test_counted_regex_compiles_lazily(vocab):
    # Its DFA x vocabulary index took minutes and ran past any budget; the lazy lexer builds
    # states as text arrives, so it compiles within the (5 s) budget. Speed itself is measured
    # in benchmarks/bench_grammar.py.
    backend = GrammarBackend(vocab, compile_timeout_s=5.0)
    try:
        params = SamplingParams(regex="[a-z]{0,300}(x|y)[0-9a-f]{0,300}")
        g = backend.submit(params).result(timeout=30)
        assert g.matches("abcx00ff") and g.matches("y") and not g.matches("abc")
    finally:
        backend.shutdown()
