"""The chat request: a chat-completions body parsed once into a frozen :class:`ChatRequest`, then planned into
a prompt that fits the context.

The ``SamplingParams`` fields of an OpenAI body: sampler fields, and constraints outside ``response_format``.

Sampler fields use OpenAI's names (``max_tokens``, ``stop``, ``logit_bias``, ...) plus SGLang's
extensions (``top_k``, ``min_p``, ``min_tokens``, ...); :func:`read_sampler_fields` returns them
under ``SamplingParams`` names, range-checked with OpenAI's limits.

Constraints may come as SGLang's and vLLM's request fields too (vLLM clients send them in
``extra_body``); each maps onto one ``SamplingParams`` field (:func:`read_structured_fields`):

| request field | SamplingParams |
|---|---|
| ``regex``, ``guided_regex``, ``structured_outputs.regex`` | ``regex`` |
| ``ebnf``, ``guided_grammar``, ``structured_outputs.grammar`` | ``ebnf`` |
| ``json_schema`` (object or JSON text), ``guided_json``, ``structured_outputs.json`` | ``json_schema`` |
| ``guided_choice``, ``structured_outputs.choice`` | ``choices`` |
| ``structured_outputs.json_object: true`` | ``json_object`` |
| ``guided_whitespace_pattern``, ``structured_outputs.whitespace_pattern`` | ``whitespace_pattern`` |

A request takes one constraint: a second one is a 400 naming it. ``guided_decoding_backend`` and
``structured_outputs``' ``disable_*`` switches are accepted and change nothing (one backend here).

Chat ``messages`` as the chat template wants them: roles checked, content as text, call args parsed.

Keys other clients send inside a message are accepted: ``reasoning_content`` (an assistant's earlier
thinking, passed to templates that render it), ``function_call`` (the legacy single call: read as
one tool call; ``null`` is nothing) and ``refusal``; the legacy ``function`` role (a function's
result, named by ``name``) is a tool message. Any other key follows the request's
:class:`~radixlm.runtime.server.transport.body.UnknownFields` policy (ignored, or a 400 when strict).

OpenAI request parsing: a JSON body becomes a frozen :class:`CompletionRequest` or :class:`ChatRequest`.

Parsing never touches the engine. Every field is type- and range-checked (a 400
:class:`~radixlm.runtime.server.transport.body.APIError` naming the bad field), and the request's
``SamplingParams`` is built here, once: later phases take copies (``SamplingParams.replace``).
Fields nobody reads are ignored and listed in the request's ``ignored`` (a 400 with
``strict=True``, i.e. ``ServerArgs.strict_api``). Sampler fields and constraint extensions are read
by :mod:`~radixlm.runtime.server.chat.request`, messages by
:mod:`~radixlm.runtime.server.chat.request`.

From a parsed chat request to its :class:`ChatPlan`: the prompt, the final sampling settings, the formats.

:func:`plan_chat` renders the messages with the chat template, checks the context length, fits
``max_new_tokens`` to the context left when the request set none, checks that the tool-call format
can express a forced call's schema, and adds the server's reasoning format. Each step derives a
new ``SamplingParams`` from the request's (``replace``); the request itself is never changed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import jinja2
from radixlm.runtime.chat_formats.reasoning.base import CLOSED, ReasoningFormat
from radixlm.runtime.chat_formats.tool_formats.base import FormatUnsupported, ToolFormat
from radixlm.runtime.chat_formats.tool_formats.registry import FORMATS
from radixlm.runtime.chat_formats.tools import ToolSpec
from radixlm.runtime.sampling_params import CONSTRAINT_FIELDS, SamplingParams
from radixlm.runtime.server.chat.tools import (
    MAX_CALLS_PER_TURN,
    ToolChoice,
    constraint_error,
    error_pointer,
    legacy_error,
    legacy_functions,
    parse_tool_choice,
    parse_tools,
)
from radixlm.runtime.server.transport.body import (
    APIError,
    FieldReader,
    UnknownFields,
    bad_request,
    check_str_list,
    client_message,
    is_kind,
    read_cache_salt,
)
from radixlm.runtime.server.transport.state import ServerState, text_chars

# SGLang extensions accepted on the OpenAI routes: kind, lower and upper bound.
_EXTENSIONS = {"top_k": ("int", None, None), "min_p": ("number", 0.0, 1.0),
               "repetition_penalty": ("number", 0.0, None), "min_tokens": ("int", 0, None),
               "ignore_eos": ("bool", None, None), "stop_token_ids": ("list", None, None),
               "no_stop_trim": ("bool", None, None), "skip_special_tokens": ("bool", None, None),
               "spaces_between_special_tokens": ("bool", None, None), "stop_regex": (("str", "list"), None, None),
               "budget_aware_completion": ("bool", None, None), "json_key_order": ("str", None, None)}
_EXTENSION_TARGET = {"min_tokens": "min_new_tokens"}  # request name -> SamplingParams name

# request field -> (SamplingParams field, JSON kinds accepted)
_TOP_LEVEL = {"regex": ("regex", "str"), "guided_regex": ("regex", "str"),
              "ebnf": ("ebnf", "str"), "guided_grammar": ("ebnf", "str"),
              "json_schema": ("json_schema", ("object", "str")), "guided_json": ("json_schema", ("object", "str")),
              "guided_choice": ("choices", ("list", "str"))}
_NESTED = {"regex": ("regex", "str"), "grammar": ("ebnf", "str"), "json": ("json_schema", ("object", "str")),
           "choice": ("choices", ("list", "str")), "json_object": ("json_object", "bool")}
_NESTED_NOOPS = ("disable_fallback", "disable_any_whitespace", "disable_additional_properties")


def read_sampler_fields(r: FieldReader, max_tokens_keys: tuple[str, ...]) -> dict[str, Any]:
    """Sampler fields shared by completions and chat, under ``SamplingParams`` names; only the
    fields the body sets (``max_new_tokens`` from the last of ``max_tokens_keys`` given)."""
    s: dict[str, Any] = {}
    for key in max_tokens_keys:
        value = r.get(key, "int", lo=0)
        if value is not None:
            s["max_new_tokens"] = value
    for key, lo, hi in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0), ("presence_penalty", -2.0, 2.0),
                        ("frequency_penalty", -2.0, 2.0)):
        value = r.get(key, "number", lo=lo, hi=hi)
        if value is not None:  # unset: the engine's default (the model's, see SamplingDefaults)
            s[key] = value
    if s.get("top_p") == 0.0:
        raise bad_request("'top_p' must be in (0, 1]", param="top_p", code="out_of_range")
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


class _Constraint:
    """The one constraint a request may carry, and the field that set it."""

    def __init__(self) -> None:
        self.sampling: dict[str, Any] = {}
        self.source: str | None = None

    def put(self, target: str, value: Any, param: str) -> None:
        if value is None or value is False:
            return
        if self.source is not None:
            raise bad_request(f"'{param}' cannot be combined with '{self.source}': a request takes one "
                              "constraint", param=param, code="invalid_value")
        self.sampling[target] = _checked(target, value, param)
        self.source = param


def read_structured_fields(r: FieldReader) -> tuple[dict[str, Any], str | None]:
    """The sampling fields these extensions set, and the request field holding the constraint
    (None without one); 400 naming the field for a wrong type or a second constraint."""
    found = _Constraint()
    for key, (target, kind) in _TOP_LEVEL.items():
        found.put(target, r.get(key, kind), key)
    ws = r.get("guided_whitespace_pattern", "str")
    r.get("guided_decoding_backend", "str")
    nested = r.get("structured_outputs", "object")
    if nested is not None:
        sub = r.sub(nested, "structured_outputs")
        for key, (target, kind) in _NESTED.items():
            found.put(target, sub.get(key, kind), sub.path(key))
        ws = sub.get("whitespace_pattern", "str", ws)
        for key in _NESTED_NOOPS:
            sub.get(key, "bool")
        sub.reject_unknown()
    out = dict(found.sampling)
    if ws is not None:
        out["whitespace_pattern"] = ws
    return out, found.source


def _checked(target: str, value: Any, param: str) -> Any:
    """A JSON-text schema parsed, choices as a list of strings, strings non-empty."""
    if target == "choices":
        return check_str_list(value, param)
    if target == "json_schema" and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise bad_request(f"'{param}' is not valid JSON: {e}", param=param, code="invalid_json") from None
        if not isinstance(value, dict):
            raise bad_request(f"'{param}' must be a JSON schema object", param=param, code="invalid_type")
    if isinstance(value, str) and not value.strip():
        raise bad_request(f"'{param}' must be a non-empty string", param=param, code="invalid_value")
    return value


ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_AS_ROLE = {"developer": "system", "function": "tool"}


def parse_messages(r: FieldReader) -> list[dict[str, Any]]:
    """``messages`` of a chat body: a non-empty list of messages (400 naming the bad one)."""
    raw = r.get("messages", "list", required=True)
    if not raw:
        raise bad_request("'messages' must not be empty", param="messages", code="invalid_value")
    return [_message(r, m, i) for i, m in enumerate(raw)]


def _message(parent: FieldReader, m: Any, i: int) -> dict[str, Any]:
    """One chat message, normalised for the template: content as a string, tool-call args as dicts."""
    prefix = f"messages[{i}]"
    if not isinstance(m, dict):
        raise bad_request(f"'{prefix}' must be an object", param=prefix, code="invalid_type")
    r = parent.sub(m, prefix)
    role = r.get("role", "str", required=True, choices=ROLES)
    out: dict[str, Any] = {"role": _AS_ROLE.get(role, role),
                           "content": _content(r.get("content", ("str", "list")), f"{prefix}.content")}
    name = r.get("name", "str")
    if name is not None:
        out["name"] = name
    if role == "tool":
        out["tool_call_id"] = r.get("tool_call_id", "str", required=True)
    elif role == "function":
        out["tool_call_id"] = r.get("name", "str", required=True)
    calls = r.get("tool_calls", "list") if role == "assistant" else None
    legacy = r.get("function_call", "object")  # read for every role; only an assistant's is a call
    if role == "assistant" and not calls and legacy is not None:
        calls = [{"id": "", "type": "function", "function": legacy}]
    if calls:
        out["tool_calls"] = [_history_call(c, f"{prefix}.tool_calls[{j}]") for j, c in enumerate(calls)]
    elif role != "assistant" and out["content"] is None:
        raise bad_request(f"'{prefix}.content' is required for role '{role}'", param=f"{prefix}.content",
                          code="missing_field")
    thought = r.get("reasoning_content", "str")
    if role == "assistant" and thought is not None:
        out["reasoning_content"] = thought
    r.get("refusal", "str")
    r.reject_unknown()
    return out


def _content(content: Any, param: str) -> str | None:
    """Message content as text; array content must be text parts."""
    if content is None or isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise bad_request(f"'{param}[{j}]' must be a text part {{\"type\": \"text\", \"text\": ...}}; "
                              "other content types are not supported", param=f"{param}[{j}]",
                              code="invalid_type")
        texts.append(part["text"])
    return "".join(texts)


def _history_call(call: Any, prefix: str) -> dict[str, Any]:
    """An earlier assistant tool call, with ``arguments`` parsed for the chat template (its other
    keys, e.g. a streamed call's ``index``, are not needed and not checked)."""
    r = FieldReader(call, prefix)
    call_id = r.get("id", "str", "")
    r.get("type", "str", "function", choices=("function",))
    fn = r.sub(r.get("function", "object", required=True), "function")
    name = fn.get("name", "str", required=True)
    args = fn.get("arguments", ("str", "object"), "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise bad_request(f"'{prefix}.function.arguments' is not valid JSON: {e}",
                              param=f"{prefix}.function.arguments", code="invalid_json") from None
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


# Accepted and ignored: they change nothing about how we generate (named in the ignored-fields header).
IGNORED_FIELDS = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls",
                            "suffix", "best_of", "modalities", "prediction", "safety_identifier",
                            "prompt_cache_key", "verbosity"})
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
MAX_N = 64


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


def read_stream_options(r: FieldReader, stream: bool) -> bool:
    """``stream_options.include_usage`` (a 400 when sent without ``stream``)."""
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


def strict_reader(body: dict[str, Any], strict: bool) -> FieldReader:
    """A reader of ``body`` that refuses unknown fields when ``strict``."""
    return FieldReader(body, unknown=UnknownFields(strict))


def read_extensions(r: FieldReader) -> tuple[str | None, dict[str, Any], str | None]:
    """SGLang's ``rid`` and the constraint extensions: (rid, their sampling fields, constraint field)."""
    rid = r.get("rid", "str")
    if rid is not None and not rid:
        raise bad_request("'rid' must be a non-empty string", param="rid", code="invalid_value")
    constraint, source = read_structured_fields(r)
    return rid, constraint, source






def parse_chat_request(body: dict[str, Any], strict: bool = False,
                       max_new_tokens_default: int = 1024) -> ChatRequest:
    """Validate a ``/v1/chat/completions`` body (400 naming the bad field; unknown fields too if
    ``strict``); without ``max_tokens``, ``max_new_tokens_default`` stands in (see :class:`ChatRequest`)."""
    r = strict_reader(body, strict)
    model = r.get("model", "str")
    messages = parse_messages(r)
    sampler = read_sampler_fields(r, ("max_tokens", "max_completion_tokens"))
    n = r.get("n", "int", 1, lo=1, hi=MAX_N)
    stream = r.get("stream", "bool", False)
    include_usage = read_stream_options(r, stream)
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
    rid, constraint, source = read_extensions(r)
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


@dataclass(frozen=True)
class ChatPlan:
    """Everything fixed for one chat request; ``sampling`` already holds the final ``max_new_tokens``."""

    prompt_ids: list[int]
    sampling: SamplingParams
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    stream: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    extra_key: str | None = None  # the radix-cache namespace (tenant and salt); every phase shares it
    fmt: ToolFormat = field(default_factory=lambda: FORMATS["hermes"])  # the family's call syntax
    max_calls: int = MAX_CALLS_PER_TURN  # 1 with parallel_tool_calls: false
    reasoning: ReasoningFormat | None = None  # splits the output into reasoning / content (None: all content)
    reasoning_state: str = "none"  # where the prompt left the thinking (reasoning.base: open/closed/none)
    think_marker: str | None = None  # a forced call waits for the model to write this (its thinking's end)
    think_resume: str = ""  # then this text precedes the call (harmony: a new message)
    opened: bool = False  # the prompt ends with the format's prompt_opener: the answer starts with a header


def plan_chat(state: ServerState, req: ChatRequest, extra_key: str | None) -> ChatPlan:
    """The plan of ``req`` (400 for messages the template cannot render, a context overflow, or a
    forced call's schema the tool-call format cannot express)."""
    state.prompts.check_chars(text_chars(req.messages), "messages")  # before rendering: the text holds them all
    text = _render(state, req)
    state.prompts.check_chars(text, "messages")  # before tokenizing a text that cannot fit
    ids = state.prompts.encode_sync(text, add_special_tokens=False)
    sampling = fit_context(state, req, len(ids), "messages")
    callable_tools = req.tool_choice.callable_tools(req.tools)  # the prompt lists them all (allowed_tools)
    if req.tool_choice.forces_call:  # a layout that cannot express a tool's schema: 400 before generating
        try:
            state.tool_format.body_constraint(callable_tools, req.tool_choice.name)
        except FormatUnsupported as e:
            raise schema_error(req, e) from None
    plan = ChatPlan(ids, sampling, callable_tools, req.tool_choice, req.stream, req.logprobs, req.top_logprobs,
                    extra_key, state.tool_format, MAX_CALLS_PER_TURN if req.parallel_tool_calls else 1,
                    opened=bool(state.tool_format.prompt_opener) and text.endswith(state.tool_format.prompt_opener))
    return _with_reasoning(state, req, plan, text)


def fit_context(state: ServerState, req: ChatRequest, prompt_len: int, prompt: str) -> SamplingParams:
    """``req``'s sampling fitted to the context a prompt of ``prompt_len`` tokens leaves: without a
    ``max_tokens`` the server's default, cut to the room left; a 400 (``context_length_exceeded``) when
    the prompt fills the context or the asked ``max_tokens`` does not fit beside it. ``prompt`` is the
    prompt's field: ``messages`` (rendered by the chat template) or a raw prompt's. The one
    context-length rule of every chat-shaped route."""
    ctx, sampling = state.context_len, req.sampling
    subject = "the messages take" if prompt == "messages" else f"'{prompt}' takes"
    if ctx and prompt_len >= ctx:
        raise APIError(400, f"this model's maximum context length is {ctx} tokens, but {subject} "
                       f"{prompt_len} tokens", param=prompt, code="context_length_exceeded")
    if not req.max_tokens_given:
        default = state.max_new_tokens_default
        return sampling.replace(max_new_tokens=min(default, max(ctx - prompt_len - 1, 1)) if ctx else default)
    if ctx and prompt_len + sampling.max_new_tokens > ctx:
        raise APIError(400, f"this model's maximum context length is {ctx} tokens; {subject} {prompt_len} "
                       f"and 'max_tokens' asks for {sampling.max_new_tokens}", param="max_tokens",
                       code="context_length_exceeded")
    return sampling


def _render(state: ServerState, req: ChatRequest) -> str:
    """The prompt text: the messages (and tools) through the chat template."""
    tools = [t.to_template() for t in req.tools] if req.tools and req.tool_choice.mode != "none" else None
    try:
        text = state.tokenizer.apply_chat_template(req.messages, tools=tools,
                                                   add_generation_prompt=req.add_generation_prompt,
                                                   **req.chat_template_kwargs)
        if req.continue_final_message:
            text = _continue_final(text, req.messages[-1])
    except Exception as e:  # jinja's raise_exception, or a template that cannot render these messages
        # the template's own words (raise_exception, jinja errors) help; a Python error's do not
        why = f": {client_message(str(e))}" if isinstance(e, (ValueError, jinja2.TemplateError)) else ""
        raise bad_request(f"the chat template cannot render these messages{why}", param="messages",
                          code="invalid_messages") from None
    return text


def _with_reasoning(state: ServerState, req: ChatRequest, plan: ChatPlan, prompt: str) -> ChatPlan:
    """``plan`` with the server's reasoning format: the output split (unless ``separate_reasoning``
    is false) and the wait for the thinking to end before a constraint."""
    fmt = state.reasoning_format
    if fmt is None:
        return plan
    changes: dict[str, Any] = {}
    reasoning_state = fmt.prompt_state(prompt)
    if req.separate_reasoning:
        changes.update(reasoning=fmt, reasoning_state=reasoning_state)
    sampling = plan.sampling
    if fmt.name == "gpt-oss" and "skip_special_tokens" not in req.sampling_fields:
        sampling = sampling.replace(skip_special_tokens=False)  # harmony's markers are special tokens
    if reasoning_state != CLOSED:  # else the template ended the thinking: the answer (and grammar) starts now
        changes.update(think_marker=fmt.call_after[0], think_resume=fmt.call_after[1])
        if any(getattr(sampling, k) for k in CONSTRAINT_FIELDS):
            sampling = sampling.replace(reasoning_end=fmt.gate_marker)  # the engine's gate: grammar after it
    return dataclasses.replace(plan, sampling=sampling, **changes)


def schema_error(req: ChatRequest, e: ValueError) -> Exception:
    """Point a constraint error at ``tools`` or ``response_format`` instead of our wrapper schema."""
    if isinstance(e, FormatUnsupported):  # the family's layout cannot express this tool's schema
        return APIError(400, str(e), param=f"tools[{e.index}].function.parameters", code="unsupported_schema")
    if error_pointer(e) is None:
        return e
    if req.tools and req.tool_choice.mode != "none":
        return constraint_error(e, req.tools, req.tool_choice.name) or e
    if req.response_format.kind == "json_schema":
        return APIError(400, f"response_format.json_schema.schema: {client_message(str(e))}",
                        param="response_format.json_schema.schema", code="unsupported_schema")
    if req.constraint_field is not None:
        return APIError(400, f"{req.constraint_field}: {client_message(str(e))}", param=req.constraint_field,
                        code="unsupported_schema")
    return e


def _continue_final(text: str, last: dict[str, Any]) -> str:
    """The rendered prompt cut right after the last message's content, so the answer continues it
    (the template's end-of-turn text after it is dropped, as transformers' continue_final_message does)."""
    content = last.get("content") or ""
    at = text.rfind(content) if content else -1
    if at < 0:
        raise ValueError("continue_final_message: the chat template does not render the last message's "
                         "content verbatim")
    return text[:at + len(content)]
