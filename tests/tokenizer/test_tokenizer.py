"""Tokenizer, incremental detokenizer and chat template on the tiny checkpoints (and odd HF layouts)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from radixlm.runtime.tokenizer.detokenizer import IncrementalDetokenizer
from radixlm.runtime.tokenizer.tokenizer import ChatTemplateError, Tokenizer

ROUND_TRIP_TEXTS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "日本語の文章と中文句子，还有한국어.",
    "Emoji: 🎉🚀 👨‍👩‍👧‍👦 🇯🇵 👍🏽 ❤️",
    "spaces:    four, tabs:\t\ttwo, trailing   ",
    "line one\nline two\n\n\nafter three newlines\r\nwindows line",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    "def f(x):\n    return x ** 2  # 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and rare chars: \u0000\u00ff\uffff",
    "",
]

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": '{"temp_c": 21}'},
    {"role": "assistant", "content": "It is 21°C."},
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def tok(tiny_llama) -> Tokenizer:
    return Tokenizer(tiny_llama)


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert b"".join(tok.id_to_bytes(i) for i in ids) == text.encode("utf-8")


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=40))
def test_round_trip_and_incremental_detok_any_text(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.step([i]) for i in ids] + [detok.finish()]
    assert "".join(deltas) == text == detok.text
    assert not any(d.endswith("\ufffd") for d in deltas)


def test_special_tokens_and_ids(tok, tiny_llama):
    config = json.loads((Path(tiny_llama) / "config.json").read_text())
    assert tok.vocab_size == config["vocab_size"] == 8192
    im_end, eos = tok.hf.token_to_id("<|im_end|>"), tok.hf.token_to_id("<|end_of_text|>")
    assert tok.eos_token_ids == [im_end, eos]
    assert tok.bos_token_id == tok.hf.token_to_id("<|begin_of_text|>") == config["bos_token_id"]
    assert tok.pad_token_id == tok.hf.token_to_id("<|pad|>")
    assert {im_end, eos, tok.bos_token_id} <= tok.special_token_ids
    call = tok.hf.token_to_id("<tool_call>")
    assert call is not None and call not in tok.special_token_ids  # tool-call tags stay in the text
    assert tok.encode("hi", add_special_tokens=True) == [tok.bos_token_id, *tok.encode("hi")]
    text = "<|im_start|>user\nhi<|im_end|><tool_call>{}</tool_call>"
    ids = tok.encode(text)
    assert ids[0] == tok.hf.token_to_id("<|im_start|>") and im_end in ids
    assert tok.decode(ids, skip_special_tokens=False) == text
    assert tok.decode(ids) == "user\nhi<tool_call>{}</tool_call>"


def test_all_token_bytes(tok):
    table = tok.all_token_bytes()
    assert len(table) == tok.vocab_size
    assert table[tok.hf.token_to_id("<|im_end|>")] == b"<|im_end|>"
    assert table[tok.encode(" the")[0]] == b" the"
    assert table[tok.encode("\n")[0]] == b"\n"
    single_bytes = {b for b in table if len(b) == 1}
    assert len(single_bytes) == 256  # byte-level BPE: every byte is a token
    with pytest.raises(ValueError, match="token_id"):
        tok.id_to_bytes(tok.vocab_size)


def test_qwen_tokenizer_adds_no_bos(tiny_qwen3):
    qtok = Tokenizer(tiny_qwen3)
    assert qtok.bos_token_id is None
    assert qtok.encode("hi", add_special_tokens=True) == qtok.encode("hi")


def test_incremental_detok_holds_back_split_emoji(tok):
    text = "ok 🦉🫖 done 𝔘"
    ids = tok.encode(text)
    split = [i for i in ids if tok.id_to_bytes(i) and not _is_utf8(tok.id_to_bytes(i))]
    assert split, "expected at least one token holding a partial UTF-8 character"
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.step([i]) for i in ids]
    assert "" in deltas  # something was held back ...
    assert all("\ufffd" not in d for d in deltas)  # ... and nothing broken was emitted
    assert "".join(deltas) + detok.finish() == tok.decode(ids)


def test_incremental_detok_chunks_specials_and_prompt(tok):
    prompt = tok.encode("User says: ")
    out = tok.encode("héllo 世界 🎉") + [tok.eos_token_ids[0]] + tok.encode(" after")
    for chunk in (1, 2, 3, 7):
        detok = IncrementalDetokenizer(tok, prompt_ids=prompt)
        deltas = [detok.step(out[i : i + chunk]) for i in range(0, len(out), chunk)]
        assert "".join(deltas) + detok.finish() == tok.decode(out)
        assert detok.output_ids == out
    keep = IncrementalDetokenizer(tok, skip_special_tokens=False)
    keep.step(out)
    assert keep.finish() == "" and keep.text == tok.decode(out, skip_special_tokens=False)


def test_incremental_detok_flushes_unfinished_character(tok):
    ids = tok.encode("🎉")
    assert len(ids) > 1
    detok = IncrementalDetokenizer(tok)
    assert detok.step(ids[:-1]) == ""
    assert detok.finish() == tok.decode(ids[:-1])  # U+FFFD, as the full decode shows it


def test_chat_template_roles_tools_and_generation_prompt(tok):
    text = tok.apply_chat_template(MESSAGES, tools=TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '{"name": "get_weather", "description": "Current weather"' in text
    assert '<|im_start|>assistant\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call><|im_end|>' in text
    assert '<|im_start|>tool\n{"temp_c": 21}<|im_end|>' in text
    assert text.endswith("It is 21°C.<|im_end|>\n<|im_start|>assistant\n")
    plain = tok.apply_chat_template(MESSAGES[1:2], add_generation_prompt=False)
    assert plain == "<|im_start|>user\nWeather in Paris?<|im_end|>\n"


def test_chat_template_matches_transformers(tok, tiny_llama):
    transformers = pytest.importorskip("transformers")
    hf_tok = transformers.AutoTokenizer.from_pretrained(tiny_llama)
    ours = tok.apply_chat_template(MESSAGES, tools=TOOLS)
    theirs = hf_tok.apply_chat_template(MESSAGES, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert ours == theirs
    assert tok.encode("Hello 世界 🎉\n  x") == hf_tok.encode("Hello 世界 🎉\n  x", add_special_tokens=False)


def test_chat_template_rejects_bad_messages(tok):
    with pytest.raises(ChatTemplateError, match="unknown role: robot"):
        tok.apply_chat_template([{"role": "robot", "content": "beep"}])
    with pytest.raises(ChatTemplateError, match="system message"):
        tok.apply_chat_template([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])
    with pytest.raises(TypeError, match="messages"):
        tok.apply_chat_template("hello")


def _copy_checkpoint_tokenizer(src: str, dst: Path) -> Path:
    dst.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "config.json"):
        shutil.copy(Path(src) / name, dst / name)
    return dst


def test_other_hf_layouts(tiny_llama, tmp_path):
    path = _copy_checkpoint_tokenizer(tiny_llama, tmp_path / "other")
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["bos_token"] = {"content": "<|begin_of_text|>", "lstrip": False}  # older AddedToken form
    config["chat_template"] = [{"name": "default", "template": "{{ messages[0].content }}!"}]
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    (path / "generation_config.json").unlink()  # eos then comes from config.json (an int) + eos_token
    other = Tokenizer(path)
    assert other.bos_token_id == 0
    assert other.eos_token_ids == [other.hf.token_to_id("<|im_end|>")]
    assert other.apply_chat_template([{"role": "user", "content": "hey"}]) == "hey!"
    (path / "chat_template.jinja").write_text("[{{ messages | length }}]")
    assert Tokenizer(path).apply_chat_template([{"role": "user", "content": "hey"}]) == "[1]"
    del config["chat_template"]
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    (path / "chat_template.jinja").unlink()
    with pytest.raises(ChatTemplateError, match="no chat template") as err:
        Tokenizer(path).apply_chat_template([{"role": "user", "content": "hey"}])
    assert "chat_template.jinja" in str(err.value) and "--chat-template" in str(err.value)


def test_a_gguf_without_a_template_names_its_key_and_the_flag(tok):
    """A base model's GGUF has no ``tokenizer.chat_template``: the error names that key, not HF's files."""
    base = Tokenizer.from_tokenizer(tok.hf, source="/models/base-Q4_K_M.gguf", special_tokens={},
                                    eos_token_ids=[0])
    with pytest.raises(ChatTemplateError) as err:
        base.apply_chat_template([{"role": "user", "content": "hey"}])
    message = str(err.value)
    assert "'tokenizer.chat_template'" in message and "--chat-template" in message
    assert "tokenizer_config.json" not in message and "chat_template.jinja" not in message


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        Tokenizer(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Tokenizer(tmp_path)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
