"""The compile worker's llguidance tokenizer: built without token slices (``compile/job.py``'s
``prepare``), with the same masks and the same encoder as the engine's (default slices)."""

from __future__ import annotations

import json

import llguidance
import pytest
from radixlm.constrained.compile.job import CompileRequest, compile_parts, constraint_grammar, prepare
from radixlm.constrained.compile.probe import build_core
from radixlm.constrained.vocab import TokenizerVocab

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "tags": {"type": "array", "items": {"type": "string"}},
                                           "n": {"type": "integer"}},
          "required": ["name", "n"]}
DOC = {"name": "hello world", "tags": ["a b", "ccc"], "n": 42}


def _copy(vocab: TokenizerVocab) -> TokenizerVocab:
    return TokenizerVocab.from_token_bytes(vocab.token_bytes, vocab.eos_token_ids, vocab.vocab_size,
                                           encode=vocab.encode)


@pytest.mark.unit
def test_prepare_builds_the_tokenizer_without_slices(vocab, monkeypatch):
    calls = []
    real = llguidance.LLTokenizer

    def recording(*args, **kwargs):
        calls.append(kwargs.get("slices", "missing"))
        return real(*args, **kwargs)

    monkeypatch.setattr(llguidance, "LLTokenizer", recording)
    worker_vocab = _copy(vocab)
    prepare(worker_vocab)
    assert calls == [[]]
    built = worker_vocab.llg
    prepare(worker_vocab)  # built once: a second prepare keeps it
    assert worker_vocab.llg is built and calls == [[]]
    assert _copy(vocab).llg is not None and calls[-1] is None  # the engine's: llguidance's default slices


def test_masks_and_encoder_equal_with_and_without_slices(vocab):
    sliced, plain = _copy(vocab), _copy(vocab)
    plain.prepare_llg(slices=[])
    text = json.dumps(DOC, separators=(",", ":"))
    # The wrappers' token lists were released after the build; the encoder still works.
    ids = plain.llg.tokenize_str(text)
    assert ids == sliced.llg.tokenize_str(text) and plain.llg.decode_str(ids) == text
    lark = constraint_grammar(CompileRequest("json_schema", SCHEMA)).lark
    cores = [build_core(v, lark, "json_schema") for v in (sliced, plain)]
    for token in ids:
        masks = [bytes(core.compute_bitmask()) for core in cores]
        assert masks[0] == masks[1]
        assert all(core.consume_token(token) for core in cores)
    assert all(core.is_accepting() for core in cores)


def test_worker_compile_runs_on_the_tokenizer_without_slices(vocab):
    worker_vocab = _copy(vocab)
    prepare(worker_vocab)
    parts = compile_parts(worker_vocab, CompileRequest("json_schema", SCHEMA))
    assert parts.lark and parts.matcher_bytes is not None and parts.matcher_bytes >= 0
