"""Grammars on real vocabularies: Llama 3's 128,256 tokens and Qwen2's 151,936, converted from
llama.cpp's vocab GGUFs (``tests/llamacpp_assets.py``; skipped with the fetch command when the
sdist cannot be fetched).

Each case has a valid instance, tokenised by the real tokenizer and accepted token by token
through ``GrammarMatcher`` (then EOS), and an invalid one that is rejected (a token or EOS is
refused). At a few random prefixes the mask is checked bit by bit against ``accept_token`` on a
sample of ids (every allowed id up to a cap, random ones, the true next token).
"""

from __future__ import annotations

import importlib.util
import json
import random

import pytest
import torch
from llamacpp_assets import fetch_or_reason
from radixlm.constrained import TokenizerVocab, compile_grammar
from radixlm.constrained.compile.worker import CompileRequest
from radixlm.constrained.testing.walks import allowed_tokens, compact_json

VOCABS = {"llama-bpe": 128_000, "qwen2": 151_000}  # GGUF name -> a lower bound of its size

_ESCAPED = ('a"b\\c\nd\té/' * 500)[:5000]  # 5,000 characters, escapes all through
_TREE = {"$defs": {"node": {"type": "object", "properties": {
    "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
    "required": ["value", "children"], "additionalProperties": False}}, "$ref": "#/$defs/node"}


def _tree(depth: int, value=1) -> dict:
    return {"value": value, "children": [] if depth == 0 else [_tree(depth - 1), _tree(depth - 1, 7)]}


_ARITH = ('root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
          'factor ::= [0-9]+ | "(" expr ")"')
CASES = {  # name -> kind, spec, valid text, invalid text
    "nested_objects": ("json_schema", {"type": "object", "required": ["user"], "properties": {"user": {
        "type": "object", "required": ["name", "address"], "properties": {
            "name": {"type": "string"}, "address": {"type": "object", "required": ["city", "zip"], "properties": {
                "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}}}}},
        compact_json({"user": {"name": "Ana Lúcia", "address": {"city": "Porto", "zip": "40001"}}}),
        compact_json({"user": {"name": "Ana", "address": {"city": "Porto", "zip": "4001"}}})),
    "recursive_ref": ("json_schema", _TREE, compact_json(_tree(4)),
                      compact_json(_tree(3)).replace('"value":7', '"value":"7"', 1)),
    "bounded_string_5000": ("json_schema", {"type": "string", "minLength": 5000, "maxLength": 5000},
                            json.dumps(_ESCAPED, ensure_ascii=False), json.dumps(_ESCAPED + "x", ensure_ascii=False)),
    "short_bounded_strings": ("json_schema", {"type": "object", "required": ["code", "tags"], "properties": {
        "code": {"type": "string", "minLength": 2, "maxLength": 3},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}}}},  # counted at runtime
        compact_json({"code": "né", "tags": ["short", "exactly8", "", "a\"b\nc"]}),
        compact_json({"code": "né", "tags": ["short", "ninechars"]})),
    "array_500": ("json_schema", {"type": "array", "items": {"type": "integer"}, "minItems": 500, "maxItems": 500},
                  compact_json(list(range(500))), compact_json(list(range(501)))),
    "ebnf_arithmetic": ("ebnf", _ARITH, "(12+3)*45-6/(7+8)", "(12+3)*45-6/(7+"),
}
# The other cores on the cases every engine supports (xgrammar only when installed).
OTHER_CORES = ["llguidance"] + (["xgrammar"] if importlib.util.find_spec("xgrammar") else [])


@pytest.fixture(scope="module", params=sorted(VOCABS))
def real(request):
    """(tokenizer, vocab) of one real vocabulary, converted once and cached under $RADIXLM_CACHE."""
    if isinstance(reason := fetch_or_reason(), str):
        pytest.skip(reason)
    from radixlm.runtime.testing.llamacpp_fixtures import gguf_tokenizer_dir
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    tokenizer = Tokenizer(gguf_tokenizer_dir(request.param))
    vocab = TokenizerVocab.from_tokenizer(tokenizer)
    assert vocab.vocab_size >= VOCABS[request.param]
    return tokenizer, vocab


def _compile(core: str, vocab: TokenizerVocab, kind: str, spec):
    if core == "radixlm":
        return compile_grammar(vocab, kind, spec)
    module = importlib.import_module(f"radixlm.constrained.adapters.{core}_core")
    return module.compile_request(vocab, CompileRequest(kind, spec))


def _accepts(grammar, ids: list[int]) -> bool:
    m = grammar.matcher()
    return all(m.accept_token(t) for t in ids) and m.accept_token(grammar.vocab.eos_token_ids[0])


def _check_masks(grammar, ids: list[int], rng: random.Random, prefixes: int = 3, cap: int = 300) -> None:
    """At ``prefixes`` random prefixes of ``ids``: mask bit == ``accept_token`` on a sample of ids."""
    vocab = grammar.vocab
    row = torch.full((vocab.mask_words,), -1, dtype=torch.int32)
    for n in sorted(rng.sample(range(len(ids)), min(prefixes, len(ids)))):
        m = grammar.matcher()
        assert all(m.accept_token(t) for t in ids[:n])
        allowed = set(allowed_tokens(m, row))
        assert ids[n] in allowed and max(allowed) < vocab.vocab_size
        sample = rng.sample(sorted(allowed), min(cap, len(allowed))) + rng.sample(range(vocab.vocab_size), cap)
        for t in sample + [ids[n], *vocab.eos_token_ids]:
            assert m.copy().accept_token(t) == (t in allowed), f"token {t} at prefix {n}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_vocab_valid_accepted_invalid_rejected(real, name):
    tokenizer, vocab = real
    kind, spec, good, bad = CASES[name]
    grammar = compile_grammar(vocab, kind, spec)
    good_ids = tokenizer.encode(good)
    assert tokenizer.decode(good_ids) == good
    assert _accepts(grammar, good_ids), f"{name}: the valid instance is rejected"
    assert not _accepts(grammar, tokenizer.encode(bad)), f"{name}: the invalid instance is accepted"
    assert grammar.validate_output(good) == [] and grammar.validate_output(bad)
    _check_masks(grammar, good_ids, random.Random(name))


@pytest.mark.parametrize("core", OTHER_CORES)
@pytest.mark.parametrize("name", ["nested_objects", "recursive_ref", "ebnf_arithmetic"])
def test_real_vocab_other_cores(real, core, name):
    tokenizer, vocab = real
    kind, spec, good, bad = CASES[name]
    grammar = _compile(core, vocab, kind, spec)
    good_ids = tokenizer.encode(good)
    assert _accepts(grammar, good_ids) and not _accepts(grammar, tokenizer.encode(bad))
    _check_masks(grammar, good_ids, random.Random(name), prefixes=2, cap=100)


# objects whose members the runtime check follows: string values, named keys sharing prefixes,
# extra keys; states inside values (plain and after a backslash), keys and extra keys, and where
# a key, a value or the next member opens
_MEMBERS = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "nick": {"type": "string"}, "nickname": {"type": "integer"},
    "tags": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}}
_MEMBER_TEXTS = ['{', '{"', '{"ni', '{"nick', '{"name":', '{"name":"ab', '{"name":"a\\', '{"name":"x"',
                 '{"name":"x","', '{"zz', '{"zz":1,"tags":{"']


def test_member_refusals_equal_feeding_each_token_whole(real, monkeypatch):
    """The runtime member check decides a step's candidates by their tails (``member_refusals``):
    on a real vocabulary its verdicts equal ``UniqueTracker.feed`` of each whole token, for every
    token, in string values, named and extra keys, and a nested checked object."""
    import numpy as np
    from radixlm.constrained.masks.member_memo import refusals

    monkeypatch.setattr("radixlm.constrained.json_schema.objects.RUNTIME_CHECK_ABOVE", -1)
    _, vocab = real
    grammar = compile_grammar(vocab, "json_schema", _MEMBERS, key_order="any")  # runtime-checked members
    tracker, table = grammar.unique_tracker, vocab.token_bytes
    assert tracker is not None and tracker.paths.specs
    every = np.arange(len(table), dtype=np.int64)
    for text in _MEMBER_TEXTS:
        state = tracker.feed(tracker.initial, text.encode())
        assert state is not None, text
        fed = np.array([tracker.feed(state, data or b"", lengths=False) is None for data in table])
        batch = refusals(tracker, vocab, state, every)
        wrong = [table[t] for t in np.flatnonzero(batch != fed)[:5]]
        assert not wrong, (text, wrong)
