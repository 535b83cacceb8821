"""Real tokenizers against llama.cpp's reference tokenizations (``ggml-vocab-*.gguf.inp`` / ``.out``).

Each vocabulary is converted to ``tokenizer.json`` by transformers' GGUF loader (cached, see
``radixlm.runtime.testing.llamacpp_fixtures``) and loaded with our ``Tokenizer``. The reference
cases are llama.cpp's: the ``.inp`` file holds the texts, each followed by a
``\\n__ggml_vocab_test__\\n`` marker line, and line i of ``.out`` holds text i's ids (the original HF
tokenizer's ``encode(text, add_special_tokens=False)``, space-separated).

Two separate questions are asked, so a failure says whose it is:
- our ``encode`` equals transformers' on the converted file in every case (our code);
- the converted file equals llama.cpp's reference, except for ``EXPECTED_DIFFERENCES`` (the
  conversion's): the set of differing texts must be exactly the table's, so it cannot grow silently
  and a fixed conversion shows up as a stale entry.
The same tokenizers then check byte fallback, special tokens, streaming and the grammar vocabulary.
"""

from __future__ import annotations

import pytest
from llamacpp_assets import fetch_or_reason
from radixlm.constrained import TokenizerVocab
from radixlm.runtime.testing.llamacpp_fixtures import convert_gguf_tokenizer, gguf_tokenizer_dir
from radixlm.runtime.tokenizer.detokenizer import IncrementalDetokenizer
from radixlm.runtime.tokenizer.tokenizer import Tokenizer

MARKER = "\n__ggml_vocab_test__\n"
# Converted in a few seconds: part of the default run. The others take 20-40 s each (cached after).
FAST = ("phi-3", "llama-spm", "deepseek-coder")
SLOW = ("llama-bpe", "qwen2", "deepseek-llm")

_SPM_PREPEND = ("transformers' GGUF converter writes a Metaspace pre-tokenizer with prepend_scheme='first', "
                "which adds no '▁' to a text that already starts with a space; llama.cpp (and the original "
                "legacy Llama tokenizer) always prepends one, hence its extra leading 29871 '▁'")
_IGNORE_MERGES = ("Llama 3's tokenizer.json has ignore_merges=true (a pre-token found whole in the vocabulary "
                  "is one token: ' Việt' -> 101798); the converter writes ignore_merges=false, so BPE merges "
                  "'ĠVi' first and ends with three tokens")
_DEEPSEEK_PRE = ("the converter uses plain GPT-2 ByteLevel splitting instead of DeepSeek's pre-tokenizer "
                 "regexes (tokenizer.ggml.pre='deepseek-*' is not mapped), so ' ½' stays one pre-token "
                 "instead of ' ' + '½'")

EXPECTED_DIFFERENCES: dict[str, dict[str, str]] = {
    "phi-3": {},
    "qwen2": {},
    "llama-spm": {text: _SPM_PREPEND for text in (
        " ", "  ", "   ", " Hello world", " Hello World", " Hello World!", " Hello, world!", " this is 🦙.cpp",
        " Hello", "  Hello", "   Hello", "    Hello", "    Hello\n    Hello", " (", " discards")},
    "llama-bpe": {"Cửa Việt": _IGNORE_MERGES},
    "deepseek-llm": {"ied 4 ½ months": _DEEPSEEK_PRE},
    "deepseek-coder": {"ied 4 ½ months": _DEEPSEEK_PRE},
}
# Shipped in the sdist but not convertible by transformers 5.x's GGUF loader (asserted, slow).
UNCONVERTIBLE = {
    "command-r": "GGUF model with architecture command-r is not supported",
    "gemma-4": "num_key_value_heads",  # the loader's config builder rejects gemma-4's per-layer list
}
# Texts beyond the reference corpus: added/special tokens in text, byte fallback, invalid UTF-8 risks.
EXTRA_TEXTS = ("<s>Hello</s> world", "<|endoftext|>x<|user|>y<|im_start|>", "a\u00a0b 🦙 \x00 \ufffd\u200d",
               "\n\n   tab\tend ", "日本語のテキスト", "emoji 😶\u200d🌫️!")


def _assets():
    assets = fetch_or_reason()
    if isinstance(assets, str):
        pytest.skip(assets)
    return assets


def reference_cases(name: str) -> list[tuple[str, list[int]]]:
    """(text, reference ids) pairs of ``ggml-vocab-<name>.gguf.inp`` / ``.out``."""
    vocab_dir = _assets().vocab_dir
    texts = (vocab_dir / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8").split(MARKER)
    if texts and texts[-1] == "":  # the marker follows every text, the last one included
        texts.pop()
    lines = (vocab_dir / f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")
    assert len(lines) >= len(texts), f"{name}: {len(texts)} texts but {len(lines)} output lines"
    return [(text, [int(t) for t in line.split()]) for text, line in zip(texts, lines)]


@pytest.fixture(scope="module")
def converted():
    """name -> our Tokenizer over the cached conversion (converting on first use)."""
    _assets()
    cache: dict[str, Tokenizer] = {}

    def get(name: str) -> Tokenizer:
        if name not in cache:
            cache[name] = Tokenizer(gguf_tokenizer_dir(name))
        return cache[name]

    return get


def check_parity(name: str, tok: Tokenizer) -> None:
    """Our encode == transformers' on every case; conversion vs reference differs only as recorded."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tok.path))
    cases = reference_cases(name)
    differing = {}
    for text, expected in cases:
        ours = tok.encode(text)
        assert ours == hf.encode(text, add_special_tokens=False), f"{name}: ours != transformers on {text!r}"
        if ours != expected:
            differing[text] = (expected, ours)
    recorded = EXPECTED_DIFFERENCES[name]
    new = {t: d for t, d in differing.items() if t not in recorded}
    assert not new, f"{name}: unrecorded differences from llama.cpp (text: (reference, ours)): {new}"
    stale = sorted(set(recorded) - set(differing))
    assert not stale, f"{name}: recorded differences that are gone (update the table): {stale}"
    print(f"{name}: {len(cases) - len(differing)}/{len(cases)} equal, {len(differing)} recorded")


def check_streaming_and_bytes(tok: Tokenizer, texts) -> None:
    """Streamed deltas concatenate to decode (alone and after a prompt); token bytes spell the text."""
    for text in texts:
        ids = tok.encode(text)
        for skip in (True, False):
            detok = IncrementalDetokenizer(tok, skip_special_tokens=skip)
            streamed = "".join(detok.step([i]) for i in ids) + detok.finish()
            assert streamed == tok.decode(ids, skip_special_tokens=skip), (text, skip)
        prompt = tok.encode("Q: hi")
        detok = IncrementalDetokenizer(tok, prompt_ids=prompt)
        streamed = "".join(detok.step([i]) for i in ids) + detok.finish()
        prompt_text = tok.decode(prompt)
        assert streamed == tok.decode(prompt + ids)[len(prompt_text):], text
        # A token's bytes are what it adds after earlier text: SentencePiece's decoder strips the
        # one leading space that "▁" gives the very first token, so that is the only allowed gap.
        spelled = b"".join(tok.id_to_bytes(i) for i in ids)
        decoded = tok.decode(ids, skip_special_tokens=False).encode("utf-8")
        assert spelled in (decoded, b" " + decoded), (text, spelled, decoded)


def check_vocab(tok: Tokenizer) -> None:
    """The grammar vocabulary: specials excluded, byte-fallback and '▁' pieces as their bytes."""
    vocab = TokenizerVocab.from_tokenizer(tok)
    assert vocab.vocab_size == tok.vocab_size
    for special in tok.special_token_ids:
        assert vocab.token_bytes[special] is None
    for token, token_id in tok.hf.get_vocab(with_added_tokens=False).items():
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            assert tok.id_to_bytes(token_id) == bytes([int(token[3:5], 16)])
        elif "\u2581" in token and token_id not in tok.special_token_ids and not tok._byte_level:
            assert tok.id_to_bytes(token_id) == token.replace("\u2581", " ").encode("utf-8")
    # Every ASCII byte is reachable on its own (jump-forward walks JSON a byte at a time); not all
    # 256: DeepSeek's byte-level vocabularies lack bytes never valid in UTF-8, such as 0xc0.
    for b in range(1, 128):
        assert vocab.byte_tokens[b] >= 0, f"no single-byte token for {b:#04x}"


def check_specials(tok: Tokenizer) -> None:
    """Special tokens in text become their single id, and decode drops them only when asked."""
    for token_id in sorted(tok.special_token_ids)[:8]:
        content = tok.hf.id_to_token(token_id)
        assert tok.encode(f"x{content}y").count(token_id) == 1, content
        assert content not in tok.decode([token_id], skip_special_tokens=True)
        assert tok.decode([token_id], skip_special_tokens=False) == content
    if tok.bos_token_id is not None and tok.encode("hi", add_special_tokens=True)[:1] == [tok.bos_token_id]:
        assert tok.encode("hi", add_special_tokens=True)[1:] == tok.encode("hi")


def run_all(name: str, tok: Tokenizer) -> None:
    check_parity(name, tok)
    texts = [text for text, _ in reference_cases(name)] + list(EXTRA_TEXTS)
    check_streaming_and_bytes(tok, texts)
    check_specials(tok)
    check_vocab(tok)


@pytest.mark.parametrize("name", FAST)
def test_fast_vocabularies(name, converted):
    run_all(name, converted(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_slow_vocabularies(name, converted):
    run_all(name, converted(name))


def test_difference_table_covers_exactly_the_tested_vocabularies():
    assert set(EXPECTED_DIFFERENCES) == set(FAST) | set(SLOW)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(UNCONVERTIBLE))
def test_unconvertible_vocabularies_still_fail(name, tmp_path):
    """When transformers learns these, this fails: add them to the parity runs."""
    _assets()
    with pytest.raises(Exception, match=UNCONVERTIBLE[name]):
        convert_gguf_tokenizer(name, tmp_path)
