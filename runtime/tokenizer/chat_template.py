"""Chat-template rendering with the semantics of ``transformers``' ``apply_chat_template``.

A checkpoint's chat template is Jinja written against transformers' environment, so a prompt is only
what the model was trained on when we render it the same way, byte for byte. What that takes:

- the inputs are prepared as transformers prepares them: message keys whose value is None are dropped
  (OpenAI sends ``content: null`` beside ``tool_calls``, and templates test ``'content' in message``);
  only when the template then fails is such a message rendered again with ``content: ""``, so tool
  histories work on the templates that read ``content`` unconditionally (there transformers raises),
  everything the template sees is rebuilt from plain JSON types, and a message's reasoning is also
  offered as ``reasoning_content`` and ``thinking`` (the names templates read);
- the variables: ``messages``, ``tools``, ``documents``, ``add_generation_prompt``, the special tokens
  that are set (``bos_token``, ``eos_token``, ...; an unset one stays undefined) and any extra keyword;
- the environment: trim_blocks and lstrip_blocks, the ``loopcontrols`` extension, the
  ``{% generation %}...{% endgeneration %}`` tag (renders its body; transformers uses it to mark
  assistant tokens), ``tojson`` with ``ensure_ascii`` / ``indent`` / ``separators`` / ``sort_keys``
  and no HTML escaping, and the globals ``raise_exception`` and ``strftime_now``.

Templates are untrusted code from model repositories, so they run in jinja2's
``ImmutableSandboxedEnvironment``, with transformers' two extra locks: ``dict`` is a plain factory (no
type to climb from) and ``namespace`` refuses underscore attribute names. Any failure while compiling
or rendering is a ``ChatTemplateError``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# The names a message's reasoning arrives under; the first is the one most templates read.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_RESERVED = frozenset({"messages", "tools", "documents", "add_generation_prompt"})


class ChatTemplateError(ValueError):
    """The checkpoint has no chat template, or the template rejected (or failed on) the messages."""


# --- the environment --------------------------------------------------------------------------


class GenerationTag(Extension):
    """``{% generation %}body{% endgeneration %}``: renders ``body`` unchanged.

    transformers records where these blocks fall to build assistant-token masks for training; serving
    only needs the text, so the tag is accepted and transparent.
    """

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | str | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    """transformers' ``tojson``: ``json.dumps`` with its keywords, unlike jinja2's HTML-escaping filter."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _DictFactory:
    """The template's ``dict``: builds dicts, but is not the ``dict`` type (nothing to reach through)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _SafeNamespace(Namespace):
    """jinja2's ``namespace`` that refuses underscore names, which could shadow its internals."""

    # No named `self`, as in jinja2's Namespace: `namespace(self=1)` must still work in a template.
    def __init__(*args: Any, **kwargs: Any) -> None:
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _SafeNamespace._check(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _SafeNamespace._check(name)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template may not set the namespace attribute {name!r}")


@lru_cache(maxsize=32)
def compile_chat_template(source: str) -> jinja2.Template:
    """Compile ``source`` in the sandbox with transformers' filters, globals and extensions (cached)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                       dict=_DictFactory(), namespace=_SafeNamespace)
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"the chat template does not compile: {exc}") from exc


# --- the inputs -------------------------------------------------------------------------------


def plain_data(value: Any) -> Any:
    """``value`` rebuilt from JSON types (dicts, lists, tuples, str, int, float, bool, None).

    Subclasses are cut back to their base type and other objects become ``"<TypeName>"``, so a template
    only ever holds objects whose methods the sandbox knows to be harmless.
    """
    if value is None or type(value) in (str, int, float, bool):
        return value
    for base in (str, int, float):  # bool cannot be subclassed
        if isinstance(value, base):
            return base(value)
    if isinstance(value, Mapping):
        return {plain_data(key): plain_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [plain_data(item) for item in value]
        return tuple(items) if isinstance(value, tuple) else items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):  # pydantic models, e.g. the OpenAI SDK's messages
        return plain_data(value.model_dump())
    return f"<{type(value).__name__}>"


def _with_reasoning_aliases(message: dict) -> dict:
    """Offer the first reasoning field set under both ``thinking`` and ``reasoning_content``."""
    reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is None:
        return message
    # Key order as transformers builds it: templates may iterate over a message's items.
    return {"thinking": reasoning, **message, "reasoning_content": reasoning}


def prepare_messages(messages: Any) -> list[dict]:
    """The messages as the template sees them: None-valued keys dropped, plain data, reasoning aliased."""
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, Mapping) for m in messages):
        raise TypeError("messages must be a list of dicts with 'role' and 'content'")
    kept = [{key: value for key, value in m.items() if value is not None} for m in messages]
    return [_with_reasoning_aliases(m) for m in plain_data(kept)]


def _check_dict_list(value: Any, what: str) -> None:
    if value is not None and (not isinstance(value, (list, tuple)) or
                              not all(isinstance(v, Mapping) for v in value)):
        raise TypeError(f"{what} must be a list of dicts (JSON schemas for tools)")


# --- rendering --------------------------------------------------------------------------------


def render_chat_template(source: str, messages: list[dict], *, tools: list[dict] | None = None,
                         documents: list[dict] | None = None, add_generation_prompt: bool = False,
                         **variables: Any) -> str:
    """Render ``messages`` with the template ``source`` exactly as transformers would.

    ``variables`` are the special tokens (``bos_token=...``; leave unset ones out) and any extra template
    variable (e.g. ``enable_thinking=False``). Raises ``TypeError`` for malformed arguments and
    ``ChatTemplateError`` when the template does not compile, calls ``raise_exception``, or fails.
    """
    clash = _RESERVED.intersection(variables)
    if clash:
        raise TypeError(f"{sorted(clash)} are set by render_chat_template itself, not as template variables")
    _check_dict_list(tools, "tools")
    _check_dict_list(documents, "documents")
    template = compile_chat_template(source)
    tools = None if tools is None else plain_data(list(tools))
    context = {**plain_data(variables), "messages": prepare_messages(messages), "tools": tools,
               "documents": plain_data(documents), "add_generation_prompt": add_generation_prompt}
    try:
        return _render(template, context)
    except ChatTemplateError:
        if not any(_null_content_call(m) or _object_arguments(m) for m in messages):
            raise
    # OpenAI clients send ``content: null`` beside ``tool_calls``; transformers drops the key, and
    # templates that read it (Qwen3, DeepSeek-R1 distills, ...) then fail, so a tool-call history
    # could not be served at all. Only where transformers has no answer: render it with "".
    fixed = [{**m, "content": ""} if _null_content_call(m) else m for m in messages]
    if fixed != messages:
        context["messages"] = prepare_messages(fixed)
        try:
            return _render(template, context)
        except ChatTemplateError:
            if not any(_object_arguments(m) for m in fixed):
                raise
    # A template that writes a call's arguments as text ('>>>' + name + '\n' + arguments: Functionary
    # v3.2) fails on the parsed object: it gets the arguments as JSON text, as the client sent them.
    context["messages"] = prepare_messages([_text_arguments(m) for m in fixed])
    return _render(template, context)


def _object_arguments(message: Mapping) -> bool:
    calls = message.get("tool_calls") or []
    return any(isinstance((c.get("function") or {}).get("arguments"), Mapping) for c in calls
               if isinstance(c, Mapping))


def _text_arguments(message: Mapping) -> Mapping:
    """``message`` with its tool calls' object arguments as JSON text."""
    if not _object_arguments(message):
        return message
    calls = [{**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"],
                                                                          ensure_ascii=False)}}
             if isinstance(c, Mapping) and isinstance((c.get("function") or {}).get("arguments"), Mapping) else c
             for c in message["tool_calls"]]
    return {**message, "tool_calls": calls}


def _null_content_call(message: Mapping) -> bool:
    return bool(message.get("tool_calls")) and message.get("content", None) is None


def _render(template: jinja2.Template, context: dict[str, Any]) -> str:
    try:
        return template.render(context)
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as exc:  # undefined values, sandbox refusals: the template's own words
        raise ChatTemplateError(f"the chat template failed: {exc}") from exc
    except Exception as exc:  # a Python error inside the template (e.g. str + None) on these messages
        raise ChatTemplateError(f"the chat template failed on these messages ({type(exc).__name__})") from exc


def select_chat_template(templates: str | list | dict | None, tools: list[dict] | None = None) -> str | None:
    """Pick the template transformers would from a config's ``chat_template`` entry.

    A single string is the template. Named templates (a ``{name: source}`` dict, or the config's
    ``[{"name", "template"}]`` list) give ``tool_use`` when tools are passed and it exists, else
    ``default``; we fall back to the first one where transformers would refuse, to keep serving.
    """
    if templates is None or isinstance(templates, str):
        return templates
    named = templates if isinstance(templates, dict) else {t["name"]: t["template"] for t in templates}
    if tools is not None and "tool_use" in named:
        return named["tool_use"]
    return named.get("default") or next(iter(named.values()), None)
