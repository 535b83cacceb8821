"""The tokenizer a GGUF file carries (``Tokenizer.from_gguf``, ``runtime/tokenizer/gguf_vocab.py``)
against llama.cpp's reference tokenizations of the same files.

The ``ggml-vocab-*.gguf`` files and their ``.inp`` / ``.out`` cases are llama.cpp's (see
``test_llamacpp_parity.py``, whose reader and table of recorded conversion differences this reuses):
a byte-level BPE with Qwen2's pre-tokenizer, Llama 3's (``llama-bpe``) and a SentencePiece vocabulary
(``llama-spm``). Built in memory here, with no ``tokenizer.json`` on disk; the special ids, the
end-of-generation set and ``add_bos_token`` come from the file's metadata.
"""

from __future__ import annotations

import pytest
from radixlm.runtime.testing.llamacpp_fixtures import vocab_gguf
from radixlm.runtime.tokenizer.tokenizer import Tokenizer
from test_llamacpp_parity import (
    EXPECTED_DIFFERENCES,
    EXTRA_TEXTS,
    _assets,
    check_specials,
    check_streaming_and_bytes,
    check_vocab,
    reference_cases,
)

FAST = ("llama-spm", "phi-3")
SLOW = ("qwen2", "llama-bpe")


def _from_gguf(name: str) -> Tokenizer:
    _assets()
    return Tokenizer.from_gguf(vocab_gguf(name))


def check_reference(name: str, tok: Tokenizer) -> None:
    """Every reference case equals llama.cpp's ids, except the recorded conversion differences."""
    cases = reference_cases(name)
    differing = {text: (want, got) for text, want in cases if (got := tok.encode(text)) != want}
    recorded = EXPECTED_DIFFERENCES[name]
    new = {t: d for t, d in differing.items() if t not in recorded}
    assert not new, f"{name}: differences from llama.cpp (text: (reference, ours)): {new}"
    assert sorted(set(recorded) - set(differing)) == [], f"{name}: recorded differences that are gone"


def check_all(name: str) -> Tokenizer:
    tok = _from_gguf(name)
    check_reference(name, tok)
    check_streaming_and_bytes(tok, [text for text, _ in reference_cases(name)] + list(EXTRA_TEXTS))
    check_specials(tok)
    check_vocab(tok)
    return tok


@pytest.mark.parametrize("name", FAST)
def test_gguf_vocab_matches_llamacpp(name):
    check_all(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_gguf_vocab_matches_llamacpp_slow(name):
    check_all(name)


def test_spm_vocab_special_ids_and_bos():
    tok = _from_gguf("llama-spm")
    assert (tok.bos_token, tok.eos_token) == ("<s>", "</s>")
    assert (tok.bos_token_id, tok.eos_token_ids) == (1, [2])
    assert tok.vocab_size == 32000
    # llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise
    assert tok.encode("Hello", add_special_tokens=True) == [1, *tok.encode("Hello")]


@pytest.mark.slow
def test_qwen2_vocab_special_ids():
    tok = _from_gguf("qwen2")
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_ids[0] == tok.hf.token_to_id("<|endoftext|>")
    assert tok.encode("hi", add_special_tokens=True) == tok.encode("hi")  # add_bos_token false
    assert tok.vocab_size <= 151936  # no added token past the file's vocabulary


@pytest.mark.slow
def test_llama_bpe_drops_added_tokens_past_the_vocabulary():
    tok = _from_gguf("llama-bpe")
    assert tok.vocab_size == 128256
    assert tok.hf.token_to_id("<|eot_id|>") in tok.eos_token_ids  # llama.cpp's end-of-generation set
