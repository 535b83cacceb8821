"""Chat-format markers that are special tokens survive decoding, and the real-shape tokenizers
carry the real models' added tokens at their real ids.

With ``skip_special_tokens`` (the default) a decoder drops every special token, so a marker such as
Llama 3's ``<|python_tag|>``, Mistral's ``[TOOL_CALLS]`` or DeepSeek's ``<｜tool▁calls▁begin｜>`` would
never reach the parsers. Each format declares its markers (``markers()``); the chat path decodes
with those kept (``keep_special_token_ids``) while every other special token is still skipped.
Tested on the real vocabularies (llama.cpp's fixtures), on the same vocabulary with other families'
markers as special tokens, and live: a call the model opens with a special-token marker under
``tool_choice: auto`` is parsed.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path

import jsonschema
import openai
import pytest
from radixlm.runtime.chat_formats.reasoning.registry import get_format as reasoning_format
from radixlm.runtime.chat_formats.tool_formats.registry import get_format
from radixlm.runtime.testing.real_shapes import rename_added_tokens

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_assets import fetch_or_reason  # noqa: E402
from tool_call_cases import API_TOOLS, ASK, GOLDEN, SCHEMAS  # noqa: E402

EOT = "<|eot_id|>"


def _real_tokenizer(tmp: Path, arch: str, size: str):
    from radixlm.runtime.testing.real_shapes import real_model, write_tokenizer
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    if isinstance(reason := fetch_or_reason(), str):
        pytest.skip(reason)
    write_tokenizer(tmp, real_model(arch, size))
    return Tokenizer(tmp)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return _real_tokenizer(tmp_path_factory.mktemp("llama"), "llama", "1b")


@pytest.mark.parametrize(("arch", "size", "tokens", "absent"), [
    ("qwen2", "0.5b", {"<tool_call>": (151657, False), "</tool_call>": (151658, False),
                       "<|object_ref_start|>": (151646, True), "<|fim_prefix|>": (151659, False),
                       "<|file_sep|>": (151664, False)}, ("<think>", "[PAD151657]")),
    ("qwen3", "0.6b", {"<tool_call>": (151657, False), "<tool_response>": (151665, False),
                       "<think>": (151667, False), "</think>": (151668, False)}, ("[PAD151667]",)),
    ("llama", "1b", {"<|finetune_right_pad_id|>": (128004, True), "<|reserved_special_token_2|>": (128005, True),
                     "<|eom_id|>": (128008, True), "<|python_tag|>": (128010, True),
                     "<|reserved_special_token_3|>": (128011, True), "<|reserved_special_token_247|>": (128255, True)},
     ("<|reserved_special_token_248|>",)),
])
def test_real_added_tokens_at_their_real_ids(tmp_path, arch, size, tokens, absent):
    tok = _real_tokenizer(tmp_path, arch, size)
    for text, (token_id, special) in tokens.items():
        assert tok.encode(text) == [token_id], text
        assert (token_id in tok.special_token_ids) == special, text
        assert tok.decode([token_id], skip_special_tokens=False) == text
    assert all(tok.hf.token_to_id(t) is None for t in absent)
    assert tok.vocab_size == {"llama": 128256}.get(arch, 151936)  # the embedding's rows, unchanged


def test_rename_refuses_ids_that_are_not_added_tokens():
    spec = {"added_tokens": [{"id": 5, "content": "<a>"}], "model": {"vocab": {"<a>": 5}}}
    with pytest.raises(ValueError, match=r"\[6\]"):
        rename_added_tokens(spec, {}, {6: ("<b>", True)})


def test_python_tag_survives_decoding_with_the_other_specials_skipped(llama):
    fmt = get_format("llama3")
    call = '<|python_tag|>{"name": "get_time", "parameters": {"zone": "UTC"}}'
    ids = llama.encode(call + "<|eom_id|>")
    assert ids[0] == 128010 and ids[-1] == 128008
    assert "<|python_tag|>" not in llama.decode(ids)  # the problem: skipped with every special token
    keep = llama.special_ids_of(fmt.markers())
    assert keep == [128010]
    assert llama.decode(ids, keep=keep) == call  # <|eom_id|> is still skipped
    detok = llama.incremental_detokenizer(keep=keep)
    assert "".join(detok.step([i]) for i in ids) + detok.finish() == call
    assert [c.name for c in fmt.parse(llama.decode(ids, keep=keep)).calls] == ["get_time"]


# family -> its markers as special tokens of a real vocabulary, as the family's tokenizer has them
SPECIAL_MARKER_FAMILIES = ("deepseekv3", "deepseekv31", "kimi_k2", "mistral", "granite")


@pytest.fixture(scope="module")
def with_markers(llama, tmp_path_factory):
    """The Llama 3 vocabulary with every family's markers (and think tags) renamed into reserved
    special tokens: a real vocabulary where those markers are single special tokens."""
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    markers = sorted({m for f in SPECIAL_MARKER_FAMILIES for m in get_format(f).markers()} | {"<think>", "</think>"})
    spec = json.loads((llama.path / "tokenizer.json").read_text(encoding="utf-8"))
    spec, config = copy.deepcopy(spec), json.loads((llama.path / "tokenizer_config.json").read_text(encoding="utf-8"))
    rename_added_tokens(spec, config, {128100 + i: (m, True) for i, m in enumerate(markers)})
    out = tmp_path_factory.mktemp("markers")
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return Tokenizer(out)


@pytest.mark.parametrize("family", SPECIAL_MARKER_FAMILIES)
def test_special_markers_reach_the_parser(with_markers, family):
    fmt, (text, _, calls) = get_format(family), GOLDEN[family][0]
    ids = with_markers.encode(text + EOT)
    keep = with_markers.special_ids_of(fmt.markers())
    assert keep and all(i in ids for i in keep if with_markers.hf.id_to_token(i) in text)
    assert fmt.parse(with_markers.decode(ids)).calls == []  # markers skipped: no call is seen
    kept = with_markers.decode(ids, keep=keep)
    assert kept == text  # the markers are back; <|eot_id|> is still skipped
    assert [(c.name, json.loads(c.arguments)) for c in fmt.parse(kept).calls] == calls


def test_think_tags_reach_the_reasoning_parser(with_markers):
    fmt = reasoning_format("qwen3")
    ids = with_markers.encode("<think>plan</think>answer" + EOT)
    split = fmt.parse(with_markers.decode(ids, keep=with_markers.special_ids_of(fmt.markers())))
    assert (split.reasoning, split.content) == ("plan", "answer")
    assert fmt.parse(with_markers.decode(ids)).reasoning == ""  # skipped: the thinking is lost in the answer


LIVE_MARKERS = {"mistral": "[TOOL_CALLS]", "deepseekv31": "<｜tool▁calls▁begin｜>", "kimi_k2": "<|tool_calls_section_begin|>",
                "llama3": "<|python_tag|>"}


@pytest.fixture(scope="module")
def marker_checkpoint(tmp_path_factory):
    """The tiny test checkpoint with reserved special tokens renamed to the families' markers."""
    from radixlm.runtime.checkpoints.synthetic import default_model_path

    out = tmp_path_factory.mktemp("tiny-markers") / "ckpt"
    shutil.copytree(default_model_path(), out)
    spec = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    reserved = [t["id"] for t in spec["added_tokens"] if t["content"].startswith("<|reserved_special_token_")]
    rename_added_tokens(spec, config, {tid: (m, True) for tid, m in zip(reserved, LIVE_MARKERS.values())})
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return out


@pytest.mark.parametrize("family", sorted(LIVE_MARKERS))
def test_auto_calls_opened_by_a_special_token_are_parsed(marker_checkpoint, family):
    from radixlm.runtime.engine.engine import Engine
    from radixlm.runtime.server.app import BackgroundServer
    from radixlm.runtime.server.transport.state import ServerConfig

    engine = Engine(str(marker_checkpoint), max_total_tokens=4096, random_seed=0, tool_call_parser=family)
    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    try:
        marker_id = engine.tokenizer.encode(LIVE_MARKERS[family])
        assert len(marker_id) == 1 and marker_id[0] in engine.tokenizer.special_token_ids
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=60)
        out = client.chat.completions.create(model="default", messages=ASK, tools=API_TOOLS, tool_choice="auto",
                                             max_tokens=120, temperature=1.0, seed=0, parallel_tool_calls=False,
                                             logit_bias={str(marker_id[0]): 100})  # the model opens a call
        choice = out.choices[0]
        assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1, choice
        call = choice.message.tool_calls[0].function
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
        assert not choice.message.content  # the marker is not content
    finally:
        srv.stop()
        engine.shutdown()
