"""``POST /v1/responses`` bodies: checked, then written as the equivalent chat-completions body.

The Responses API is served statelessly: ``input`` (text, or items: messages, ``function_call``,
``function_call_output``, ``reasoning``) holds the whole conversation and ``instructions`` becomes
the system message. ``previous_response_id``, ``background`` and ``item_reference`` items need
stored responses, so they are a 400 that says so. Function tools map onto the chat route's tools,
``text.format`` onto ``response_format``, ``reasoning.effort`` onto the chat template's
``reasoning_effort``, ``prompt_cache_key`` onto the radix-cache salt. Errors name the field as the
request wrote it (``input[2].content[0].type``, ``text.format.schema``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.server.chat_pipeline import ParamMap
from radixlm.runtime.server.http_errors import bad_request
from radixlm.runtime.server.request_fields import FieldReader, UnknownFields

# Accepted; they change nothing here (named in the ignored-fields header when sent).
DROPPED = frozenset({"user", "service_tier", "safety_identifier", "stream_options", "max_tool_calls", "prompt",
                     "conversation", "context_management"})
TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
PARAMS = ParamMap((
    ("max_tokens", "max_output_tokens"),
    (r"response_format\.json_schema\.schema", "text.format.schema"),
    (r"response_format\.json_schema", "text.format"),
    ("response_format", "text.format"),
    (r"tools\[(\d+)\]\.function\.parameters", r"tools[\1].parameters"),
    (r"tools\[(\d+)\]\.function", r"tools[\1]"),
    (r"tool_choice\.function", "tool_choice"),
    ("cache_salt", "prompt_cache_key"),
    ("messages", "input"),
))


@dataclass(frozen=True)
class ResponsesRequest:
    """A checked body: ``chat`` is the chat-completions body; ``echo`` the settings the response
    object repeats; ``logprobs`` whether ``output_text`` parts carry them."""

    chat: dict[str, Any]
    echo: dict[str, Any]
    stream: bool = False
    logprobs: bool = False
    ignored: UnknownFields = field(default_factory=UnknownFields)


def parse_responses_request(body: dict[str, Any], strict: bool = False) -> ResponsesRequest:
    """Check a ``/v1/responses`` body (400 naming the bad field; unknown fields too if ``strict``)."""
    r = FieldReader(body, unknown=UnknownFields(strict))
    _refuse_stored(r)
    messages = _instructions(r) + input_messages(r.get("input", ("str", "list"), required=True))
    chat: dict[str, Any] = {"messages": messages, "model": r.get("model", "str")}
    _sampler_fields(r, chat)
    tools = [_tool(t, i) for i, t in enumerate(r.get("tools", "list") or [])]
    if tools:
        chat["tools"] = tools
    choice = r.get("tool_choice", ("str", "object"))
    if choice is not None:
        chat["tool_choice"] = _tool_choice(r, choice)
    fmt = _text_format(r)
    if fmt is not None:
        chat["response_format"] = fmt
    effort = _reasoning(r)
    if effort is not None:
        chat["reasoning_effort"] = effort
    top = r.get("top_logprobs", "int", lo=0, hi=20)
    logprobs = top is not None or "message.output_text.logprobs" in (r.get("include", "list") or [])
    if logprobs:
        chat.update(logprobs=True, top_logprobs=top or 0)
    chat["stream"] = r.get("stream", "bool", False)
    r.get("store", "bool")  # nothing is stored: the response says store false
    truncation = r.get("truncation", "str", "disabled", choices=("disabled", "auto"))
    metadata = _metadata(r)
    r.reject_unknown(DROPPED)
    if truncation == "auto":  # nothing is truncated: a prompt over the context is a 400
        r.unknown.names.append("truncation")
    echo = {"instructions": body.get("instructions"), "max_output_tokens": chat.get("max_tokens"),
            "metadata": metadata, "parallel_tool_calls": chat.get("parallel_tool_calls", True),
            "temperature": chat.get("temperature", 1.0), "top_p": chat.get("top_p", 1.0),
            "tool_choice": choice if choice is not None else "auto",
            "tools": [{"type": "function", **t["function"]} for t in tools],
            "text": {"format": body["text"]["format"] if fmt is not None else {"type": "text"}},
            "reasoning": {"effort": effort, "summary": None}, "truncation": truncation,
            "top_logprobs": top, "user": body.get("user")}
    return ResponsesRequest(chat, echo, chat["stream"], logprobs, r.unknown)


def _refuse_stored(r: FieldReader) -> None:
    """400 for what needs stored responses: this server keeps none."""
    for key in ("previous_response_id", "conversation"):
        if r.get(key, ("str", "object")) is not None:
            raise bad_request(f"'{key}' needs stored responses, and this server keeps none (it is "
                              "stateless); send the whole conversation in 'input'", param=key,
                              code="unsupported_parameter")
    if r.get("background", "bool", False):
        raise bad_request("'background' needs stored responses, and this server keeps none; stream "
                          "instead", param="background", code="unsupported_parameter")


def _sampler_fields(r: FieldReader, chat: dict[str, Any]) -> None:
    """The sampler and cache fields, under their chat names."""
    for key, chat_key, kind in (("temperature", "temperature", "number"), ("top_p", "top_p", "number"),
                                ("max_output_tokens", "max_tokens", "int"),
                                ("parallel_tool_calls", "parallel_tool_calls", "bool"),
                                ("prompt_cache_key", "cache_salt", "str"), ("seed", "seed", "int")):
        value = r.get(key, kind, lo=1 if key == "max_output_tokens" else None)
        if value is not None:
            chat[chat_key] = value


def _instructions(r: FieldReader) -> list[dict[str, Any]]:
    text = r.get("instructions", "str")
    return [{"role": "system", "content": text}] if text else []


def input_messages(raw: str | list) -> list[dict[str, Any]]:
    """``input`` as chat messages: calls join the assistant turn before them, reasoning the next one."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not raw:
        raise bad_request("'input' must not be empty", param="input", code="invalid_value")
    out: list[dict[str, Any]] = []
    thought: str | None = None  # a reasoning item's text, for the assistant turn that follows it
    for i, item in enumerate(raw):
        path = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"'{path}' must be an object", param=path, code="invalid_type")
        r = FieldReader(item, path)
        kind = r.get("type", "str", "message")
        if kind == "reasoning":
            thought = _reasoning_text(r)
            continue
        if kind == "message":
            msg = _message(r)
        elif kind == "function_call":
            msg = _function_call(r, out)
        elif kind == "function_call_output":
            msg = {"role": "tool", "tool_call_id": r.get("call_id", "str", required=True),
                   "content": _text(r.get("output", ("str", "list"), required=True), f"{path}.output")}
            r.get("id", "str")
            r.get("status", "str")
        else:
            raise bad_request(f"'{path}.type' {kind!r} is not supported here (message, function_call, "
                              "function_call_output and reasoning items are; this server keeps no stored "
                              "items)", param=f"{path}.type", code="unsupported_value")
        r.reject_unknown()
        if msg["role"] == "assistant" and thought is not None:
            msg["reasoning_content"], thought = thought, None
        if msg is not (out[-1] if out else None):
            out.append(msg)
    if not out:
        raise bad_request("'input' holds no message", param="input", code="invalid_value")
    return out


def _message(r: FieldReader) -> dict[str, Any]:
    role = r.get("role", "str", required=True, choices=("user", "system", "developer", "assistant"))
    content = _text(r.get("content", ("str", "list"), required=True), r.path("content"))
    r.get("id", "str")
    r.get("status", "str")
    return {"role": "system" if role == "developer" else role, "content": content}


def _function_call(r: FieldReader, out: list[dict[str, Any]]) -> dict[str, Any]:
    """An earlier call, added to the assistant turn it follows (a new turn if there is none)."""
    args = r.get("arguments", "str", required=True)
    try:
        json.loads(args)
    except json.JSONDecodeError as e:
        raise bad_request(f"'{r.path('arguments')}' is not valid JSON: {e}", param=r.path("arguments"),
                          code="invalid_json") from None
    call = {"id": r.get("call_id", "str", required=True), "type": "function",
            "function": {"name": r.get("name", "str", required=True), "arguments": args}}
    r.get("id", "str")
    r.get("status", "str")
    last = out[-1] if out else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
        return last
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _text(content: str | list, path: str) -> str:
    """Message content as text: a string, or text parts (images and files are not read by this model)."""
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(part.get("text", part.get("refusal")), str):
            raise bad_request(f"'{path}[{j}]' must be a text part ({', '.join(TEXT_PARTS)}); got "
                              f"{kind!r}: this server reads text only", param=f"{path}[{j}]",
                              code="unsupported_value")
        texts.append(part.get("text", part.get("refusal")))
    return "".join(texts)


def _reasoning_text(r: FieldReader) -> str:
    parts = (r.get("content", "list") or []) + (r.get("summary", "list") or [])
    r.get("id", "str")
    r.get("encrypted_content", "str")
    r.get("status", "str")
    return "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def _tool(item: Any, i: int) -> dict[str, Any]:
    path = f"tools[{i}]"
    if not isinstance(item, dict):
        raise bad_request(f"'{path}' must be an object", param=path, code="invalid_type")
    r = FieldReader(item, path)
    kind = r.get("type", "str", required=True)
    if kind != "function":
        raise bad_request(f"'{path}.type' {kind!r} is not supported: only function tools run here",
                          param=f"{path}.type", code="unsupported_value")
    fn = {"name": r.get("name", "str", required=True)}
    for key, kinds in (("description", "str"), ("parameters", "object"), ("strict", "bool")):
        if r.get(key, kinds) is not None:
            fn[key] = item[key]
    r.reject_unknown()
    return {"type": "function", "function": fn}


def _tool_choice(r: FieldReader, choice: str | dict) -> str | dict:
    if isinstance(choice, str):
        return choice
    sub = r.sub(choice, "tool_choice")
    sub.get("type", "str", required=True, choices=("function",))
    name = sub.get("name", "str", required=True)
    sub.reject_unknown()
    return {"type": "function", "function": {"name": name}}


def _text_format(r: FieldReader) -> dict[str, Any] | None:
    text = r.get("text", "object")
    if text is None:
        return None
    t = r.sub(text, "text")
    verbosity = t.get("verbosity", "str", choices=("low", "medium", "high"))
    raw = t.get("format", "object")
    t.reject_unknown()
    if verbosity is not None:
        r.unknown.names.append("text.verbosity")
    if raw is None:
        return None
    f = t.sub(raw, "format")
    kind = f.get("type", "str", required=True, choices=("text", "json_object", "json_schema"))
    if kind != "json_schema":
        f.reject_unknown()
        return {"type": kind}
    spec = {"name": f.get("name", "str", required=True), "schema": f.get("schema", "object", required=True)}
    for key, kind in (("strict", "bool"), ("description", "str")):
        if f.get(key, kind) is not None:
            spec[key] = raw[key]
    f.reject_unknown()
    return {"type": "json_schema", "json_schema": spec}


def _reasoning(r: FieldReader) -> str | None:
    """``reasoning.effort`` (``summary`` is named as ignored: the thinking is returned whole)."""
    raw = r.get("reasoning", "object")
    if raw is None:
        return None
    sub = r.sub(raw, "reasoning")
    effort = sub.get("effort", "str", choices=("none", "minimal", "low", "medium", "high", "xhigh"))
    summary = sub.get("summary", "str", choices=("auto", "concise", "detailed"))
    sub.get("generate_summary", "str")
    sub.reject_unknown()
    if summary is not None:
        r.unknown.names.append("reasoning.summary")
    return effort


def _metadata(r: FieldReader) -> dict[str, str]:
    meta = r.get("metadata", "object") or {}
    for key, value in meta.items():
        if not isinstance(value, str):
            raise bad_request(f"'metadata.{key}' must be a string", param=f"metadata.{key}", code="invalid_type")
    return meta
