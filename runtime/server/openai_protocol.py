"""OpenAI request parsing (into dataclasses, every field type- and range-checked) and response shapes.

Parsing never touches the engine: it turns a JSON body into a :class:`CompletionRequest` or a
:class:`ChatRequest` whose ``sampling`` dict is ready for ``SamplingParams.from_dict``, or raises
a 400 :class:`~radixlm.runtime.server.http_errors.APIError` naming the bad field. Fields nobody
reads are ignored and listed in the request's ``ignored`` (a 400 with ``strict=True``, i.e.
``ServerArgs.strict_api``); constraints outside ``response_format`` are read by
:mod:`~radixlm.runtime.server.structured_fields`, messages by :mod:`~radixlm.runtime.server.chat_messages`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.chat_formats.tools import ToolSpec
from radixlm.runtime.server.chat_messages import parse_messages
from radixlm.runtime.server.http_errors import bad_request
from radixlm.runtime.server.request_fields import (
    FieldReader,
    UnknownFields,
    check_str_list,
    check_token_ids,
    is_kind,
    read_cache_salt,
)
from radixlm.runtime.server.structured_fields import read_structured_fields
from radixlm.runtime.server.tool_calls import ToolChoice, parse_tool_choice, parse_tools

# Accepted and ignored: they change nothing about how we generate.
IGNORED_FIELDS = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls",
                            "suffix", "best_of", "modalities", "prediction", "reasoning_effort"})
# SGLang extensions accepted on the OpenAI routes (SamplingParams names).
_EXTENSIONS = {"top_k": ("int", None, None), "min_p": ("number", 0.0, 1.0),
               "repetition_penalty": ("number", 0.0, None), "min_tokens": ("int", 0, None),
               "ignore_eos": ("bool", None, None), "stop_token_ids": ("list", None, None),
               "no_stop_trim": ("bool", None, None), "skip_special_tokens": ("bool", None, None),
               "spaces_between_special_tokens": ("bool", None, None)}
_EXTENSION_TARGET = {"min_tokens": "min_new_tokens"}
MAX_N = 64


@dataclass
class ResponseFormat:
    """``response_format``: kind is ``text`` | ``json_object`` | ``json_schema``."""

    kind: str = "text"
    name: str | None = None
    schema: dict | None = None
    strict: bool | None = None  # OpenAI's switch; False selects our lenient mode (violations reported)


@dataclass
class CompletionRequest:
    """A parsed ``POST /v1/completions`` body; ``prompts`` holds text or token-id lists."""

    model: str | None
    prompts: list[str | list[int]]
    sampling: dict[str, Any]
    n: int = 1
    echo: bool = False
    logprobs: int | None = None
    stream: bool = False
    include_usage: bool = False
    salt: str | None = None  # cache_salt / extra_key: the request's radix-cache namespace
    rid: str | None = None  # SGLang's request id: /abort_request takes it
    constraint_field: str | None = None  # the request field holding a regex / ebnf / schema extension
    ignored: UnknownFields = field(default_factory=UnknownFields)


@dataclass
class ChatRequest:
    """A parsed ``POST /v1/chat/completions`` body; ``messages`` are ready for the chat template."""

    model: str | None
    messages: list[dict[str, Any]]
    sampling: dict[str, Any]
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    response_format: ResponseFormat = field(default_factory=ResponseFormat)
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    salt: str | None = None
    parallel_tool_calls: bool = True  # false: at most one call per answer
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # extra chat-template variables
    separate_reasoning: bool = True  # SGLang's: false leaves the thinking in content
    continue_final_message: bool = False  # the answer continues the last (assistant) message
    add_generation_prompt: bool = True
    rid: str | None = None
    constraint_field: str | None = None
    ignored: UnknownFields = field(default_factory=UnknownFields)


def _common_sampling(r: FieldReader, max_tokens_keys: tuple[str, ...], max_default: int | None) -> dict:
    """Sampler fields shared by completions and chat, renamed to ``SamplingParams`` fields."""
    s: dict[str, Any] = {}
    max_tokens = max_default
    for key in max_tokens_keys:
        value = r.get(key, "int", lo=0)
        if value is not None:
            max_tokens = value
    if max_tokens is not None:
        s["max_new_tokens"] = max_tokens
    s["temperature"] = r.get("temperature", "number", 1.0, lo=0.0, hi=2.0)
    s["top_p"] = r.get("top_p", "number", 1.0, lo=0.0, hi=1.0)
    if s["top_p"] == 0.0:
        raise bad_request("'top_p' must be in (0, 1]", param="top_p", code="out_of_range")
    s["presence_penalty"] = r.get("presence_penalty", "number", 0.0, lo=-2.0, hi=2.0)
    s["frequency_penalty"] = r.get("frequency_penalty", "number", 0.0, lo=-2.0, hi=2.0)
    seed = r.get("seed", "int")
    if seed is not None:
        s["seed"] = seed
    stop = r.get("stop", ("str", "list"))
    if stop is not None:
        s["stop"] = check_str_list(stop, "stop")
    bias = r.get("logit_bias", "object")
    if bias:
        s["logit_bias"] = _logit_bias(bias)
    for key, (kind, lo, hi) in _EXTENSIONS.items():
        value = r.get(key, kind, lo=lo, hi=hi)
        if value is not None:
            s[_EXTENSION_TARGET.get(key, key)] = value
    return s


def _logit_bias(bias: dict) -> dict[int, float]:
    out = {}
    for key, value in bias.items():
        if not (isinstance(key, str) and key.isdigit()) or not is_kind(value, "number"):
            raise bad_request(f"'logit_bias' must map token ids to numbers, got {key!r}: {value!r}",
                              param="logit_bias", code="invalid_type")
        if not -100 <= value <= 100:
            raise bad_request(f"'logit_bias[{key}]' must be in [-100, 100], got {value}",
                              param="logit_bias", code="out_of_range")
        out[int(key)] = float(value)
    return out


def _stream_options(r: FieldReader, stream: bool) -> bool:
    opts = r.get("stream_options", "object")
    if opts is None:
        return False
    if not stream:
        raise bad_request("'stream_options' is only allowed when 'stream' is true", param="stream_options")
    sub = r.sub(opts, "stream_options")
    include = sub.get("include_usage", "bool", False)
    sub.get("continuous_usage_stats", "bool")
    sub.reject_unknown()
    return include


def _reader(body: dict[str, Any], strict: bool) -> FieldReader:
    return FieldReader(body, unknown=UnknownFields(strict))


def _extensions(r: FieldReader, sampling: dict[str, Any]) -> tuple[str | None, str | None]:
    """SGLang's ``rid`` and the constraint extensions (merged into ``sampling``): (rid, constraint field)."""
    rid = r.get("rid", "str")
    if rid is not None and not rid:
        raise bad_request("'rid' must be a non-empty string", param="rid", code="invalid_value")
    constraint, source = read_structured_fields(r)
    sampling.update(constraint)
    return rid, source


def parse_completion_request(body: dict[str, Any], strict: bool = False) -> CompletionRequest:
    """Validate a ``/v1/completions`` body (400 naming the bad field; unknown fields too if ``strict``)."""
    r = _reader(body, strict)
    model = r.get("model", "str")
    raw = r.get("prompt", ("str", "list"), required=True)
    prompts = _prompts(raw)
    sampling = _common_sampling(r, ("max_tokens",), 16)
    n = r.get("n", "int", 1, lo=1, hi=MAX_N)
    echo = r.get("echo", "bool", False)
    logprobs = r.get("logprobs", "int", lo=0, hi=20)
    stream = r.get("stream", "bool", False)
    include_usage = _stream_options(r, stream)
    salt = read_cache_salt(r)
    rid, source = _extensions(r, sampling)
    r.reject_unknown(IGNORED_FIELDS)
    return CompletionRequest(model, prompts, sampling, n, echo, logprobs, stream, include_usage, salt, rid,
                             source, r.unknown)


def _prompts(raw: Any) -> list[str | list[int]]:
    """``prompt``: a string, a list of strings, a token-id list, or a list of token-id lists."""
    if isinstance(raw, str):
        raw = [raw]
    if not raw:
        raise bad_request("'prompt' must not be empty", param="prompt", code="invalid_value")
    if all(is_kind(t, "int") for t in raw):
        return [check_token_ids(raw, "prompt")]
    out: list[str | list[int]] = []
    for i, p in enumerate(raw):
        if isinstance(p, list):
            out.append(check_token_ids(p, f"prompt[{i}]"))
        elif isinstance(p, str) and p:
            out.append(p)
        else:
            raise bad_request(f"'prompt[{i}]' must be a non-empty string or an array of token ids",
                              param=f"prompt[{i}]", code="invalid_type")
    return out


def parse_chat_request(body: dict[str, Any], strict: bool = False) -> ChatRequest:
    """Validate a ``/v1/chat/completions`` body (400 naming the bad field; unknown fields too if ``strict``)."""
    r = _reader(body, strict)
    model = r.get("model", "str")
    messages = parse_messages(r)
    sampling = _common_sampling(r, ("max_tokens", "max_completion_tokens"), None)
    n = r.get("n", "int", 1, lo=1, hi=MAX_N)
    stream = r.get("stream", "bool", False)
    include_usage = _stream_options(r, stream)
    logprobs = r.get("logprobs", "bool", False)
    top_logprobs = r.get("top_logprobs", "int", 0, lo=0, hi=20)
    if top_logprobs and not logprobs:
        raise bad_request("'top_logprobs' requires 'logprobs' to be true", param="top_logprobs")
    fmt = _response_format(r)
    tools = parse_tools(r.get("tools", "list"))
    choice = parse_tool_choice(r.get("tool_choice", ("str", "object")), tools)
    rid, source = _extensions(r, sampling)
    _check_one_constraint(fmt, choice, tools, source)
    salt = read_cache_salt(r)
    parallel = r.get("parallel_tool_calls", "bool", True)
    template_kwargs = _template_kwargs(r.get("chat_template_kwargs", "object"))
    separate = r.get("separate_reasoning", "bool", True)
    cont = r.get("continue_final_message", "bool", False)
    add_prompt = r.get("add_generation_prompt", "bool", not cont)
    if cont and (add_prompt or messages[-1]["role"] != "assistant"):
        raise bad_request("'continue_final_message' needs the last message to be the assistant's and "
                          "'add_generation_prompt' false", param="continue_final_message")
    r.reject_unknown(IGNORED_FIELDS)
    return ChatRequest(model, messages, sampling, n, stream, include_usage, logprobs, top_logprobs,
                       fmt, tools, choice, salt, parallel, template_kwargs, separate, cont, add_prompt, rid,
                       source, r.unknown)


def _check_one_constraint(fmt: ResponseFormat, choice: ToolChoice, tools: list[ToolSpec],
                          source: str | None) -> None:
    """One constraint per answer: response_format, a top-level extension or the tool-call syntax."""
    if choice.mode == "auto" and fmt.kind != "text":
        raise bad_request("'response_format' other than text cannot be combined with tool_choice "
                          "'auto'; use tool_choice 'none', 'required' or a named function",
                          param="response_format")
    if source is None:
        return
    if fmt.kind != "text":
        raise bad_request(f"'{source}' cannot be combined with 'response_format': a request takes one "
                          "constraint", param=source, code="invalid_value")
    if tools and choice.mode != "none":
        raise bad_request(f"'{source}' cannot be combined with tools unless tool_choice is 'none'",
                          param=source, code="invalid_value")


# Variables the server itself passes to the chat template; a client may not override them.
_TEMPLATE_OWN = ("messages", "tools", "add_generation_prompt", "documents")


def _template_kwargs(kwargs: dict | None) -> dict[str, Any]:
    """``chat_template_kwargs``: extra template variables (``{"enable_thinking": false}``)."""
    for key in kwargs or {}:
        if key in _TEMPLATE_OWN:
            raise bad_request(f"'chat_template_kwargs.{key}' is set by the server, not by the request",
                              param=f"chat_template_kwargs.{key}", code="invalid_value")
    return dict(kwargs or {})


def _response_format(parent: FieldReader) -> ResponseFormat:
    fmt = parent.get("response_format", "object")
    if fmt is None:
        return ResponseFormat()
    r = parent.sub(fmt, "response_format")
    kind = r.get("type", "str", required=True, choices=("text", "json_object", "json_schema"))
    if kind != "json_schema":
        r.reject_unknown()
        return ResponseFormat(kind)
    js = r.sub(r.get("json_schema", "object", required=True), "json_schema")
    name = js.get("name", "str", required=True)
    schema = js.get("schema", "object", {})
    strict = js.get("strict", "bool")
    js.get("description", "str")
    js.reject_unknown()
    r.reject_unknown()
    return ResponseFormat("json_schema", name, schema, strict)


# ---- response shapes -------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage_dict(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def envelope(obj: str, rid: str, model: str, choices: list[dict], usage: dict | None = None) -> dict:
    """The outer object every completion / chunk shares."""
    out = {"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": choices,
           "system_fingerprint": None}
    if usage is not None or obj.endswith(".chunk"):
        out["usage"] = usage
    return out


def finish_reason(meta: dict[str, Any]) -> str | None:
    """Engine ``finish_reason`` {type, matched} -> OpenAI's string."""
    fr = meta.get("finish_reason")
    if fr is None:
        return None
    kind = fr.get("type") if isinstance(fr, dict) else str(fr)
    return {"stop": "stop", "length": "length"}.get(kind, kind)
