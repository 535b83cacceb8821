"""The prompt of a chat request with tools is transformers' own: for each real template of llama.cpp's
corpus (llama-cpp-python's sdist), the text the server renders for a request equals
``tokenizer.apply_chat_template(messages, tools=<the request's tools>, add_generation_prompt=True,
tokenize=False)`` byte for byte.

The request goes through the OpenAI request parser and the chat plan's rendering, so any rebuilding of
the tools on the way (dropped ``strict``, a default ``parameters`` filled in, keys reordered) shows up
as a difference. Where transformers raises on a template, the server must refuse the request (a 400)
instead of rendering something else, unless the renderer's documented fallback serves it: a template
that concatenates a call's ``arguments`` gets them as JSON text
(:mod:`radixlm.runtime.tokenizer.chat_template`), and then the prompt is transformers' rendering of that.
"""

from __future__ import annotations

import copy
import functools
import json
from types import SimpleNamespace

import llamacpp_assets
import pytest
from radixlm.runtime.server.chat.request import _render, parse_chat_request
from radixlm.runtime.server.transport.body import APIError
from radixlm.runtime.tokenizer.chat_template import render_chat_template

transformers = pytest.importorskip("transformers")

SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
CALL_ID = "call0A1b2"  # 9 alphanumerics: Mistral's templates reject any other tool-call id
# What clients send, not what a rebuild would write: keys in the client's order, ``strict``, a tool
# with no description, non-ASCII (what ``tojson(ensure_ascii=...)`` changes).
TOOLS = [
    {"type": "function", "function": {
        "description": "Current weather in a city", "name": "get_weather", "strict": True,
        "parameters": {"type": "object", "required": ["city"], "additionalProperties": False,
                       "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"},
                                      "unit": {"type": "string", "enum": ["c", "f"]}}}}},
    {"function": {"name": "get_time", "parameters": {"type": "object", "properties": {
        "tz": {"type": "string", "description": "IANA zone"}}, "required": ["tz"]}}, "type": "function"},
]
FIRST_TURN = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Zürich, and the time there?"},
]
SECOND_TURN = FIRST_TURN + [
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
    {"role": "tool", "tool_call_id": CALL_ID, "content": '{"temp_c": 21}'},
]
CONVERSATIONS = {"first": FIRST_TURN, "second": SECOND_TURN}

_ASSETS = llamacpp_assets.fetch_or_reason()  # at collection: the parameters are the template names
TEMPLATE_NAMES = ([p.name for p in _ASSETS.templates()] if isinstance(_ASSETS, llamacpp_assets.LlamaCppAssets)
                  else ["corpus-unavailable"])


@pytest.fixture(scope="module")
def corpus():
    """The templates folder; skips (naming the fetch command) when the corpus cannot be downloaded."""
    assets = llamacpp_assets.fetch_or_reason()
    if isinstance(assets, str):
        pytest.skip(assets)
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip(f"the parity target is transformers 5.x; {transformers.__version__} is installed")
    return assets.templates_dir


@functools.lru_cache(maxsize=1)
def _hf_tokenizer():
    """A transformers tokenizer that only exists to run ``apply_chat_template`` (no model download)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS.values())}
    backend = Tokenizer(WordLevel(vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **SPECIAL_TOKENS)


def _theirs(source: str, messages: list[dict]) -> str | Exception:
    try:
        return _hf_tokenizer().apply_chat_template(copy.deepcopy(messages), tools=copy.deepcopy(TOOLS),
                                                   chat_template=source, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # transformers' verdict on the template: compared below
        return exc


def _ours(source: str, messages: list[dict]) -> str | APIError:
    """The server's prompt for the request: parsed as the OpenAI route parses it, rendered by the plan."""
    def apply(msgs, tools=None, add_generation_prompt=True, **kwargs):
        return render_chat_template(source, msgs, tools=tools, add_generation_prompt=add_generation_prompt,
                                    **{**SPECIAL_TOKENS, **kwargs})

    body = {"model": "m", "messages": copy.deepcopy(messages), "tools": copy.deepcopy(TOOLS)}
    state = SimpleNamespace(tokenizer=SimpleNamespace(apply_chat_template=apply))
    try:
        return _render(state, parse_chat_request(body))
    except APIError as err:
        return err


def _text_arguments(message: dict) -> dict:
    """``message`` with its tool calls' arguments as JSON text (the renderer's fallback)."""
    calls = [{**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"],
                                                                          ensure_ascii=False)}}
             for c in message.get("tool_calls") or []]
    return {**message, "tool_calls": calls} if calls else message


@pytest.mark.parametrize("kind", sorted(CONVERSATIONS))
@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_the_tools_prompt_is_transformers_own(corpus, name, kind):
    source = (corpus / name).read_text(encoding="utf-8")
    theirs, ours = _theirs(source, CONVERSATIONS[kind]), _ours(source, CONVERSATIONS[kind])
    if isinstance(theirs, Exception) and kind == "second":
        theirs = _theirs(source, [_text_arguments(m) for m in CONVERSATIONS[kind]])
    if isinstance(theirs, Exception):
        assert isinstance(ours, APIError) and ours.status == 400, f"transformers raises {theirs!r}; we give {ours!r}"
    else:
        assert ours == theirs


def test_the_request_entry_is_what_the_template_sees():
    req = parse_chat_request({"model": "m", "messages": FIRST_TURN, "tools": TOOLS})
    assert [t.to_template() for t in req.tools] == TOOLS
    assert [list(t.to_template()["function"]) for t in req.tools] == [list(t["function"]) for t in TOOLS]
