"""Chat templates render exactly as transformers renders them, over llama.cpp's corpus of real templates.

Every ``*.jinja`` in llama.cpp's ``models/templates`` (pinned through the llama-cpp-python sdist, see
``llamacpp_assets.py``) renders two conversations with our renderer and with transformers'
``apply_chat_template`` (a word-level tokenizer built in memory, so nothing is downloaded but the corpus):
a plain multi-turn chat, and a tool-calling one. The outputs must be equal; where transformers raises
(templates that reject a system or tool role, or the conversation's shape), we must raise
``ChatTemplateError``. ``test_corpus_figures`` prints and pins how many of each there are.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from pathlib import Path

import llamacpp_assets
import pytest
from radixlm.runtime.tokenizer.chat_template import (
    ChatTemplateError,
    render_chat_template,
    select_chat_template,
)

transformers = pytest.importorskip("transformers")

SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
CALL_ID = "call0A1b2"  # 9 alphanumerics: Mistral's templates reject any other tool-call id
PLAIN_CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "Name a prime, s'il vous plaît."},
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}}}}}]
TOOL_CHAT = [  # non-ASCII on purpose: it is what tojson(ensure_ascii=...) changes
    {"role": "user", "content": "Weather in Zürich?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}]},
    {"role": "tool", "tool_call_id": CALL_ID, "name": "get_weather", "content": '{"temp_c": 21, "sky": "clear"}'},
    {"role": "user", "content": "Thanks! And tomorrow?"},
]
CONVERSATIONS = {"plain": (PLAIN_CHAT, None), "tools": (TOOL_CHAT, TOOLS)}
# The figures over llama-cpp-python 0.3.36's 70 templates with transformers 5.x.
# Raising is transformers' verdict too (e.g. gemma-2 has no system role, Kimi-K2 calls list.append, which
# the sandbox forbids, Qwen3 reads the `content` that transformers drops when it is None).
EXPECTED_FIGURES = {"plain": (65, 0, 5), "tools": (52, 10, 8)}  # (equal, served by the fallbacks, raising)

_ASSETS = llamacpp_assets.fetch_or_reason()  # at collection: the parameters are the template names
TEMPLATE_NAMES = ([p.name for p in _ASSETS.templates()] if isinstance(_ASSETS, llamacpp_assets.LlamaCppAssets)
                  else ["corpus-unavailable"])


@pytest.fixture(scope="module")
def corpus() -> Path:
    """The templates folder; skips (naming the fetch command) when the corpus cannot be downloaded."""
    assets = llamacpp_assets.fetch_or_reason()
    if isinstance(assets, str):
        pytest.skip(assets)
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip(f"the parity target is transformers 5.x (drops None-valued message keys); "
                    f"{transformers.__version__} is installed")
    return assets.templates_dir


@functools.lru_cache(maxsize=1)
def _hf_tokenizer():
    """A transformers tokenizer that only exists to run ``apply_chat_template`` (no model download)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS.values())}
    backend = Tokenizer(WordLevel(vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **SPECIAL_TOKENS)
    assert hf.special_tokens_map == SPECIAL_TOKENS  # so both renderers see the same variables
    return hf


@dataclass(frozen=True)
class Outcome:
    """Both renderings of one template and conversation: the text, or the exception raised."""

    theirs: str | Exception
    ours: str | Exception
    theirs_empty: str | Exception | None = None  # transformers with content "" (see render_both)


def _attempt(render) -> str | Exception:
    try:
        return render()
    except Exception as exc:  # the verdict is the point: compared, never swallowed
        return exc


def _hf_render(source: str, messages: list[dict], tools: list[dict] | None) -> str | Exception:
    return _attempt(lambda: _hf_tokenizer().apply_chat_template(
        copy.deepcopy(messages), tools=copy.deepcopy(tools), chat_template=source, tokenize=False,
        add_generation_prompt=True))


def render_both(source: str, messages: list[dict], tools: list[dict] | None) -> Outcome:
    """Render with transformers and with us, each on its own copy (neither may see the other's edits).

    ``theirs_empty``: transformers on the same messages with ``content: ""`` where a tool-call turn
    has ``content: None`` (our renderer's fallback when the template fails on the dropped key), and
    where that fails too, with the calls' arguments as JSON text (its fallback for templates that
    concatenate them, e.g. Functionary v3.2's)."""
    theirs = _hf_render(source, messages, tools)
    ours = _attempt(lambda: render_chat_template(
        source, copy.deepcopy(messages), tools=copy.deepcopy(tools), add_generation_prompt=True, **SPECIAL_TOKENS))
    emptied = [{**m, "content": ""} if m.get("tool_calls") and m.get("content") is None else m for m in messages]
    theirs_empty = _hf_render(source, emptied, tools) if isinstance(theirs, Exception) else theirs
    if isinstance(theirs_empty, Exception):
        theirs_empty = _hf_render(source, [_text_arguments(m) for m in emptied], tools)
    return Outcome(theirs, ours, theirs_empty)


def _text_arguments(message: dict) -> dict:
    """``message`` with its tool calls' object arguments as JSON text."""
    calls = [{**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"],
                                                                          ensure_ascii=False)}}
             if isinstance(c.get("function", {}).get("arguments"), dict) else c for c in message.get("tool_calls") or []]
    return {**message, "tool_calls": calls} if calls else message


@functools.cache
def corpus_outcome(templates_dir: Path, name: str, kind: str) -> Outcome:
    """``render_both`` for a corpus template, cached: the figures test reuses the per-template runs."""
    messages, tools = CONVERSATIONS[kind]
    return render_both((templates_dir / name).read_text(encoding="utf-8"), messages, tools)


def assert_parity(outcome: Outcome, what: str) -> None:
    """Equal text, or both raising (ours as ``ChatTemplateError``), or, where transformers raises only
    because a tool-call turn's ``content: None`` was dropped, equal to its rendering with ``""``."""
    if isinstance(outcome.theirs, Exception):
        if not isinstance(outcome.theirs_empty, Exception):
            assert outcome.ours == outcome.theirs_empty, f"{what}: the content-\"\" fallback differs"
            return
        assert isinstance(outcome.ours, ChatTemplateError), (
            f"{what}: transformers raises {outcome.theirs!r}, we give {outcome.ours!r}")
    else:
        assert not isinstance(outcome.ours, Exception), f"{what}: transformers renders, we raise {outcome.ours!r}"
        assert outcome.ours == outcome.theirs, f"{what}: renderings differ"


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_plain_chat_matches_transformers(corpus, name):
    assert_parity(corpus_outcome(corpus, name, "plain"), f"{name} (plain)")


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_tool_chat_matches_transformers(corpus, name):
    assert_parity(corpus_outcome(corpus, name, "tools"), f"{name} (tools)")


def test_corpus_figures(corpus, capsys, record_property):
    """Count equal and raising-in-both renderings, print them, and pin them."""
    names = [p.name for p in sorted(corpus.glob("*.jinja"))]
    figures = {}
    for kind in CONVERSATIONS:
        outcomes = [corpus_outcome(corpus, name, kind) for name in names]
        raising = [n for n, o in zip(names, outcomes) if isinstance(o.theirs, Exception)
                   and isinstance(o.theirs_empty, Exception)]
        served = [n for n, o in zip(names, outcomes) if isinstance(o.theirs, Exception)
                  and not isinstance(o.theirs_empty, Exception) and o.ours == o.theirs_empty]
        equal = sum(not isinstance(o.theirs, Exception) and o.ours == o.theirs for o in outcomes)
        figures[kind] = (equal, len(served), len(raising))
        record_property(f"{kind}_served_by_the_empty_content_fallback", ", ".join(served))
        record_property(f"{kind}_equal", f"{equal}/{len(names)}")
        record_property(f"{kind}_raising_in_both", ", ".join(raising))
        with capsys.disabled():
            print(f"\nchat-template corpus, {kind}: {equal}/{len(names)} equal to transformers, "
                  f"{len(served)} served with content \"\" where transformers raises: {', '.join(served)}; "
                  f"{len(raising)} raising in both: {', '.join(raising)}")
    assert figures == EXPECTED_FIGURES


# --- the features behind the corpus, one small template each (no corpus needed) ----------------

FEATURES = {
    "tojson-kwargs": "{{ messages[0] | tojson(ensure_ascii=False, indent=2, sort_keys=True) }}"
                     "{{ messages[0].content | tojson(ensure_ascii=True, separators=(',', ':')) }}",
    "tojson-no-html-escape": "{{ ('<b>' ~ messages[0].content ~ \"&'\") | tojson }}{{ {'a': '<'} | tojson + '<' }}",
    "generation-tag": "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
    "loopcontrols": "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.role }}{% endfor %}",
    "none-content-dropped": "{% for m in messages %}{{ 'content' in m }}{{ m.content is defined }}|{% endfor %}",
    "special-tokens": "{{ bos_token }}{{ eos_token }}{{ sep_token is defined }}{{ mask_token | default('-') }}",
    "reasoning-aliases": "{% for m in messages %}{{ m.thinking }}/{{ m.reasoning_content }}/{{ m | tojson }}{% endfor %}",
    "dict-and-namespace": "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                          "{% endfor %}{{ ns.n }}{{ dict(a=1, b=2) | tojson }}{{ dict.fromkeys(['x']) | tojson }}",
    "trim-and-lstrip": "{% for m in messages %}\n    {% if m.role %}\n{{ m.role }}\n    {% endif %}\n{% endfor %}",
    "documents-and-prompt": "{{ documents | tojson }}{{ tools | tojson }}{{ add_generation_prompt }}",
}
RAISING_FEATURES = {  # transformers raises on each; so must we (as ChatTemplateError)
    "raise-exception": "{{ raise_exception('no ' ~ messages[0].role) }}",
    "sandbox-blocks-mutation": "{% set xs = [] %}{{ xs.append(1) }}",
    "sandbox-blocks-dunder": "{{ messages.__class__ }}{{ dict.__class__.__subclasses__() }}",
    "namespace-underscore": "{% set ns = namespace() %}{% set ns._secret = 1 %}",
    "python-error": "{{ messages[0].content + 1 }}",
    "syntax-error": "{% if %}",
}
FEATURE_MESSAGES = [
    {"role": "user", "content": "Grüße <&>"},
    {"role": "assistant", "content": None, "reasoning": "think ünïcode", "tool_calls": None},
]


@pytest.mark.parametrize("feature", sorted(FEATURES) + sorted(RAISING_FEATURES))
def test_feature_matches_transformers(feature):
    source = FEATURES.get(feature) or RAISING_FEATURES[feature]
    outcome = render_both(source, FEATURE_MESSAGES, None)
    assert isinstance(outcome.theirs, Exception) == (feature in RAISING_FEATURES), outcome.theirs
    assert_parity(outcome, feature)


def test_documents_and_extra_variables_reach_the_template():
    docs = [{"title": "T", "text": "body"}]
    text = render_chat_template("{{ documents[0].title }}{{ enable_thinking }}", PLAIN_CHAT, documents=docs,
                                enable_thinking=False)
    assert text == "TFalse"
    with pytest.raises(TypeError, match="messages"):
        render_chat_template("x", "hello")
    with pytest.raises(TypeError, match="tools"):
        render_chat_template("x", PLAIN_CHAT, tools=["get_weather"])


def test_named_templates_pick_tool_use_with_tools():
    named = [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]
    assert select_chat_template(named) == "D"
    assert select_chat_template(named, tools=TOOLS) == "T"
    assert select_chat_template({"rag": "R"}) == "R"
    assert select_chat_template("S", tools=TOOLS) == "S"
