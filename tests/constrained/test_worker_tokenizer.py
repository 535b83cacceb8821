"""The compile worker's llguidance tokenizer: built without token slices and with the byte
encoder (``compile/job.py``'s ``prepare``), with the same masks and the same encoder as the
engine's (``ENGINE_SLICES``, llguidance's JSON-string slice)."""

from __future__ import annotations

import gc
import json
import weakref

import llguidance
import pytest
from radixlm.constrained.compile.job import compile_parts, constraint_grammar, prepare
from radixlm.constrained.compile.worker import CompileRequest, ProbeVocab, build_core
from radixlm.constrained.vocab import ENGINE_SLICES, TokenizerVocab

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "tags": {"type": "array", "items": {"type": "string"}},
                                           "n": {"type": "integer"}},
          "required": ["name", "n"]}
DOC = {"name": "hello world", "tags": ["a b", "ccc"], "n": 42}


def _copy(vocab: TokenizerVocab) -> TokenizerVocab:
    return TokenizerVocab.from_token_bytes(vocab.token_bytes, vocab.eos_token_ids, vocab.vocab_size,
                                           encode=vocab.encode)


@pytest.fixture
def slices_built(monkeypatch) -> list:
    """The ``slices`` of every ``llguidance.LLTokenizer`` built while the test runs."""
    calls = []
    real = llguidance.LLTokenizer

    def recording(*args, **kwargs):
        calls.append(kwargs.get("slices", "missing"))
        return real(*args, **kwargs)

    monkeypatch.setattr(llguidance, "LLTokenizer", recording)
    return calls


@pytest.mark.unit
def test_prepare_builds_the_tokenizer_without_slices(vocab, slices_built):
    calls = slices_built
    worker_vocab = _copy(vocab)
    prepare(worker_vocab)
    assert calls == [[]]
    built = worker_vocab.llg
    prepare(worker_vocab)  # built once: a second prepare keeps it
    assert worker_vocab.llg is built and calls == [[]]
    assert _copy(vocab).llg is not None and calls[-1] == list(ENGINE_SLICES)  # the engine's


@pytest.mark.unit
def test_engine_slice_is_llguidances_json_string_slice():
    assert list(ENGINE_SLICES) == llguidance.LLTokenizer.general_slices()[-1:]


@pytest.mark.unit
def test_worker_keeps_only_what_probes_read_and_never_builds_the_greedy_index(vocab):
    table = TokenizerVocab.from_token_bytes(vocab.token_bytes, vocab.eos_token_ids, vocab.vocab_size)
    probe_vocab = prepare(table)  # what a worker does: no ``encode`` travels to it
    assert "_index" not in table.__dict__  # the greedy encoder's index (~10 MB at 152k) is never built
    assert isinstance(probe_vocab, ProbeVocab) and probe_vocab.byte_tokens == table.byte_tokens
    gone = weakref.ref(table)
    del table
    gc.collect()
    assert gone() is None  # nothing, the native tokenizer's encoder included, keeps the token table
    ids = probe_vocab.llg.tokenize_str('{"a": 1}')  # the byte encoder
    assert ids == [probe_vocab.byte_tokens[b] for b in b'{"a": 1}'] and probe_vocab.llg.decode_str(ids) == '{"a": 1}'
    parts = compile_parts(probe_vocab, CompileRequest("json_schema", SCHEMA))
    assert parts.lark and parts.matcher_bytes is not None


@pytest.mark.unit
def test_byte_encoder_falls_back_to_greedy_where_a_byte_has_no_token():
    tokens = [b"a", b"b", b"ab", b"\xc3\xa9", None]  # no single-byte token for 0xc3 or 0xa9
    table = TokenizerVocab.from_token_bytes(tokens, [4])
    table.prepare_llg(slices=[], byte_encoder=True)
    assert table.llg.tokenize_str("ab") == [0, 1]
    assert table.llg.tokenize_str("\u00e9a") == [3, 0]


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
    parts = compile_parts(prepare(_copy(vocab)), CompileRequest("json_schema", SCHEMA))
    assert parts.lark and parts.matcher_bytes is not None and parts.matcher_bytes >= 0


@pytest.mark.parametrize("core,want", [("llguidance", None), ("radixlm", list(ENGINE_SLICES))])
def test_each_backend_builds_the_tokenizer_with_its_slices(vocab, slices_built, core, want):
    """``--grammar-backend llguidance`` runs llguidance as it ships (its default slices); radixlm keeps one."""
    from radixlm.constrained import GrammarBackend

    calls = slices_built
    table = _copy(vocab)
    backend = GrammarBackend(table, core=core, num_workers=1)
    try:
        assert table.llg is not None and calls == [want]
    finally:
        backend.shutdown()
