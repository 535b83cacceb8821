"""OpenAI request parsing: a JSON body becomes a frozen :class:`CompletionRequest` or :class:`ChatRequest`.

Parsing never touches the engine. Every field is type- and range-checked (a 400
:class:`~radixlm.runtime.server.http_errors.APIError` naming the bad field), and the request's
``SamplingParams`` is built here, once: later phases take copies (``SamplingParams.replace``).
Fields nobody reads are ignored and listed in the request's ``ignored`` (a 400 with
``strict=True``, i.e. ``ServerArgs.strict_api``). Sampler fields and constraint extensions are read
by :mod:`~radixlm.runtime.server.openai_sampling`, messages by
:mod:`~radixlm.runtime.server.chat_messages`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.chat_formats.tools import ToolSpec
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.server.chat_messages import parse_messages
from radixlm.runtime.server.http_errors import APIError, bad_request
from radixlm.runtime.server.openai_sampling import read_sampler_fields, read_structured_fields
from radixlm.runtime.server.request_fields import (
    FieldReader,
    UnknownFields,
    check_token_ids,
    is_kind,
    read_cache_salt,
)
from radixlm.runtime.server.tool_calls import (
    ToolChoice,
    legacy_error,
    legacy_functions,
    parse_tool_choice,
    parse_tools,
)

# Accepted and ignored: they change nothing about how we generate (named in the ignored-fields header).
IGNORED_FIELDS = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls",
                            "suffix", "best_of", "modalities", "prediction", "safety_identifier",
                            "prompt_cache_key", "verbosity"})
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
MAX_N = 64
COMPLETION_MAX_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions


@dataclass(frozen=True)
class ResponseFormat:
    """``response_format``: kind is ``text`` | ``json_object`` | ``json_schema``."""

    kind: str = "text"
    name: str | None = None
    schema: dict | None = None
    strict: bool | None = None  # OpenAI's switch; False selects our lenient mode (violations reported)

    def sampling_fields(self) -> dict[str, Any]:
        """The ``SamplingParams`` fields this format sets (strict false: the lenient mode)."""
        if self.kind == "json_object":
            return {"json_object": True}
        if self.kind != "json_schema":
            return {}
        return {"json_schema": self.schema} if self.strict is not False else \
            {"json_schema": self.schema, "strict": False}


@dataclass(frozen=True)
class CompletionRequest:
    """A parsed ``POST /v1/completions`` body; ``prompts`` holds text or token-id lists."""

    model: str | None
    prompts: list[str | list[int]]
    sampling: SamplingParams  # choice j of a prompt draws with seed + j
    n: int = 1
    echo: bool = False
    logprobs: int | None = None
    stream: bool = False
    include_usage: bool = False
    salt: str | None = None  # cache_salt / extra_key: the request's radix-cache namespace
    rid: str | None = None  # SGLang's request id: /abort_request takes it
    constraint_field: str | None = None  # the request field holding a regex / ebnf / schema extension
    ignored: UnknownFields = field(default_factory=UnknownFields)
    suffix: str | None = None  # fill-in-the-middle: each prompt is the code before the gap, this after it


@dataclass(frozen=True)
class ChatRequest:
    """A parsed ``POST /v1/chat/completions`` body; ``messages`` are ready for the chat template.

    ``sampling`` holds the whole request's settings, ``response_format``'s constraint included
    (unless a tool call is forced: then the call's constraint replaces it); without ``max_tokens``
    its ``max_new_tokens`` is the server's default, which the route fits to the context left.
    ``sampling_fields`` names the ``SamplingParams`` fields the body set."""

    model: str | None
    messages: list[dict[str, Any]]
    sampling: SamplingParams
    sampling_fields: frozenset[str] = frozenset()
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
    legacy_functions: bool = False  # sent functions / function_call: the call is answered as function_call

    @property
    def max_tokens_given(self) -> bool:
        """Whether the body set ``max_tokens`` / ``max_completion_tokens``."""
        return "max_new_tokens" in self.sampling_fields


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


def _extensions(r: FieldReader) -> tuple[str | None, dict[str, Any], str | None]:
    """SGLang's ``rid`` and the constraint extensions: (rid, their sampling fields, constraint field)."""
    rid = r.get("rid", "str")
    if rid is not None and not rid:
        raise bad_request("'rid' must be a non-empty string", param="rid", code="invalid_value")
    constraint, source = read_structured_fields(r)
    return rid, constraint, source


def parse_completion_request(body: dict[str, Any], strict: bool = False) -> CompletionRequest:
    """Validate a ``/v1/completions`` body (400 naming the bad field; unknown fields too if ``strict``)."""
    r = _reader(body, strict)
    model = r.get("model", "str")
    raw = r.get("prompt", ("str", "list"), required=True)
    prompts = _prompts(raw)
    sampler = read_sampler_fields(r, ("max_tokens",))
    n = r.get("n", "int", 1, lo=1, hi=MAX_N)
    echo = r.get("echo", "bool", False)
    suffix = r.get("suffix", "str") or None
    if suffix is not None and (echo or not all(isinstance(p, str) for p in prompts)):
        raise bad_request("'suffix' (fill-in-the-middle) takes text prompts and no 'echo'", param="suffix",
                          code="invalid_value")
    logprobs = r.get("logprobs", "int", lo=0, hi=20)
    stream = r.get("stream", "bool", False)
    include_usage = _stream_options(r, stream)
    salt = read_cache_salt(r)
    rid, constraint, source = _extensions(r)
    r.reject_unknown(IGNORED_FIELDS)
    sampling = SamplingParams(**{"max_new_tokens": COMPLETION_MAX_TOKENS, **sampler, **constraint})
    return CompletionRequest(model, prompts, sampling, n=n, echo=echo, logprobs=logprobs, stream=stream,
                             include_usage=include_usage, salt=salt, rid=rid, constraint_field=source,
                             ignored=r.unknown, suffix=suffix)


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


def parse_chat_request(body: dict[str, Any], strict: bool = False,
                       max_new_tokens_default: int = 1024) -> ChatRequest:
    """Validate a ``/v1/chat/completions`` body (400 naming the bad field; unknown fields too if
    ``strict``); without ``max_tokens``, ``max_new_tokens_default`` stands in (see :class:`ChatRequest`)."""
    r = _reader(body, strict)
    model = r.get("model", "str")
    messages = parse_messages(r)
    sampler = read_sampler_fields(r, ("max_tokens", "max_completion_tokens"))
    n = r.get("n", "int", 1, lo=1, hi=MAX_N)
    stream = r.get("stream", "bool", False)
    include_usage = _stream_options(r, stream)
    logprobs = r.get("logprobs", "bool", False)
    top_logprobs = r.get("top_logprobs", "int", 0, lo=0, hi=20)
    if top_logprobs and not logprobs:
        raise bad_request("'top_logprobs' requires 'logprobs' to be true", param="top_logprobs")
    fmt = _response_format(r)
    old_tools, old_choice = legacy_functions(r)
    legacy = old_tools is not None or old_choice is not None
    try:
        tools = parse_tools(r.get("tools", "list") if old_tools is None else old_tools)
        choice = parse_tool_choice(r.get("tool_choice", ("str", "object")) if old_choice is None else old_choice,
                                   tools)
    except APIError as e:
        raise legacy_error(e) if legacy else e from None
    rid, constraint, source = _extensions(r)
    _check_one_constraint(fmt, choice, tools, source)
    salt = read_cache_salt(r)
    parallel = r.get("parallel_tool_calls", "bool", True) and not legacy  # a legacy answer holds one call
    template_kwargs = check_template_kwargs(r.get("chat_template_kwargs", "object"))
    effort = r.get("reasoning_effort", "str", choices=REASONING_EFFORTS)
    if effort is not None:  # a template variable (gpt-oss renders it); chat_template_kwargs' own wins
        template_kwargs.setdefault("reasoning_effort", effort)
    separate = r.get("separate_reasoning", "bool", True)
    cont = r.get("continue_final_message", "bool", False)
    add_prompt = r.get("add_generation_prompt", "bool", not cont)
    if cont and (add_prompt or messages[-1]["role"] != "assistant"):
        raise bad_request("'continue_final_message' needs the last message to be the assistant's and "
                          "'add_generation_prompt' false", param="continue_final_message")
    r.reject_unknown(IGNORED_FIELDS)
    fields = {**sampler, **constraint, **({} if choice.forces_call else fmt.sampling_fields())}
    sampling = SamplingParams(**{"max_new_tokens": max_new_tokens_default, **fields})
    return ChatRequest(model, messages, sampling, frozenset(fields), n=n, stream=stream,
                       include_usage=include_usage, logprobs=logprobs, top_logprobs=top_logprobs,
                       response_format=fmt, tools=tools, tool_choice=choice, salt=salt,
                       parallel_tool_calls=parallel, chat_template_kwargs=template_kwargs,
                       separate_reasoning=separate, continue_final_message=cont,
                       add_generation_prompt=add_prompt, rid=rid, constraint_field=source, ignored=r.unknown,
                       legacy_functions=legacy)


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


def check_template_kwargs(kwargs: dict | None) -> dict[str, Any]:
    """``chat_template_kwargs``: extra template variables (``{"enable_thinking": false}``); a
    variable the server sets itself (``messages``, ``tools``, ...) is a 400 naming it."""
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
