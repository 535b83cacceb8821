"""``POST /v1/messages`` bodies (Anthropic's Messages API): checked, then written as a chat-completions body.

``system`` becomes the system message; a user turn's ``tool_result`` blocks become tool messages
(before the turn's text), an assistant turn's ``tool_use`` blocks its tool calls and its
``thinking`` blocks its ``reasoning_content``. Custom tools (``input_schema``) map onto function
tools; ``tool_choice`` ``auto`` / ``any`` / ``tool`` / ``none`` onto auto / required / a named
function / none (``disable_parallel_tool_use``: one call per turn); ``stop_sequences`` onto
``stop``; ``thinking`` (``enabled`` with its ``budget_tokens``, ``adaptive``, ``between_tools``,
``disabled``) onto the chat template's ``enable_thinking`` (the budget shares ``max_tokens``: named
in the ignored-fields header; ``display: "omitted"`` sends thinking blocks empty);
``output_config.format`` (a JSON schema: ``client.messages.parse``) onto ``response_format``'s
``json_schema``, the same grammar engine, and ``output_config.effort`` onto ``reasoning_effort``.
Images, documents and server tools are a 400 naming the block (this server reads text only).
Unknown keys at any depth (``tools[i].strict``, ``messages[i].id``) are ignored and named in the
ignored-fields header. Errors name the field as the request wrote it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from radixlm.runtime.server.chat_pipeline import ParamMap
from radixlm.runtime.server.http_errors import bad_request
from radixlm.runtime.server.request_fields import FieldReader, UnknownFields, check_str_list

DROPPED = frozenset({"metadata", "service_tier", "container", "mcp_servers", "context_management"})
PARAMS = ParamMap((
    ("stop", "stop_sequences"),
    (r"tools\[(\d+)\]\.function\.parameters", r"tools[\1].input_schema"),
    (r"tools\[(\d+)\]\.function", r"tools[\1]"),
    (r"tool_choice\.function", "tool_choice"),
    (r"response_format\.json_schema\.schema", "output_config.format.schema"),
    ("response_format", "output_config.format"),
))
THINKING_ON = {"enabled": True, "adaptive": True, "between_tools": True, "disabled": False}
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "xhigh"}
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


@dataclass(frozen=True)
class MessagesRequest:
    """A checked body: ``chat`` is the chat-completions body."""

    chat: dict[str, Any]
    model: str
    stream: bool = False
    ignored: UnknownFields = field(default_factory=UnknownFields)
    omit_thinking: bool = False  # thinking.display "omitted": thinking blocks sent empty


def parse_messages_request(body: dict[str, Any], strict: bool = False) -> MessagesRequest:
    """Check a ``/v1/messages`` body (400 naming the bad field; unknown fields too if ``strict``)."""
    r = FieldReader(body, unknown=UnknownFields(strict))
    model = r.get("model", "str", required=True)
    chat: dict[str, Any] = {"max_tokens": r.get("max_tokens", "int", required=True, lo=1)}
    system = _system(r.get("system", ("str", "list")))
    raw = r.get("messages", "list", required=True)
    if not raw:
        raise bad_request("'messages' must not be empty", param="messages", code="invalid_value")
    messages = [{"role": "system", "content": system}] if system else []
    for i, m in enumerate(raw):
        messages += _turn(m, f"messages[{i}]")
    chat["messages"] = messages
    for key, kind, lo, hi in (("temperature", "number", 0, 1), ("top_p", "number", 0, 1),
                              ("top_k", "int", 1, None)):
        value = r.get(key, kind, lo=lo, hi=hi)
        if value is not None:
            chat[key] = value
    stops = r.get("stop_sequences", "list")
    if stops:
        chat["stop"] = check_str_list(stops, "stop_sequences")
    tools = [_tool(t, i) for i, t in enumerate(r.get("tools", "list") or [])]
    if tools:
        chat["tools"] = tools
    _tool_choice(r, chat)
    omit_thinking = _thinking(r, chat)
    _output_config(r, chat)
    stream = r.get("stream", "bool", False)
    chat["stream"] = stream
    r.reject_unknown(DROPPED)
    return MessagesRequest(chat, model, stream, r.unknown, omit_thinking)


def _system(raw: str | list | None) -> str:
    if raw is None or isinstance(raw, str):
        return raw or ""
    return _texts(raw, "system")


def _texts(blocks: list, path: str) -> str:
    """Text blocks as one string (other block types: a 400 naming the block)."""
    out = []
    for j, b in enumerate(blocks):
        if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
            raise bad_request(f"'{path}[{j}]' must be a text block {{\"type\": \"text\", \"text\": ...}}; this "
                              "server reads text only", param=f"{path}[{j}]", code="invalid_type")
        out.append(b["text"])
    return "".join(out)


def _turn(m: Any, path: str) -> list[dict[str, Any]]:
    """One Anthropic turn as chat messages: tool results first (as tool messages), then the text."""
    if not isinstance(m, dict):
        raise bad_request(f"'{path}' must be an object", param=path, code="invalid_type")
    r = FieldReader(m, path)
    role = r.get("role", "str", required=True, choices=("user", "assistant"))
    content = r.get("content", ("str", "list"), required=True)
    r.reject_unknown()
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    texts, calls, results, thoughts = [], [], [], []
    for j, block in enumerate(content):
        where = f"{path}.content[{j}]"
        b = FieldReader(block, where) if isinstance(block, dict) else None
        kind = b.get("type", "str", required=True) if b is not None else None
        if kind == "text":
            texts.append(b.get("text", "str", required=True))
            b.get("cache_control", "object")
            b.get("citations", "list")
        elif kind == "tool_use" and role == "assistant":
            args = b.get("input", "object", required=True)
            calls.append({"id": b.get("id", "str", required=True), "type": "function",
                          "function": {"name": b.get("name", "str", required=True), "arguments": json.dumps(args)}})
            b.get("cache_control", "object")
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(b))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            thoughts.append(b.get("thinking", "str", ""))
            b.get("signature", "str")
            b.get("data", "str")
        else:
            raise bad_request(f"'{where}' of type {kind!r} is not supported in a {role} turn (text, tool_use in "
                              "assistant turns, tool_result in user turns, thinking); this server reads text only",
                              param=f"{where}.type" if kind else where, code="unsupported_value")
        b.reject_unknown()
    out = results
    if role == "assistant":
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
        if calls:
            msg["tool_calls"] = calls
        if thoughts:
            msg["reasoning_content"] = "".join(thoughts)
        return [msg]
    if texts or not results:
        out.append({"role": "user", "content": "".join(texts)})
    return out


def _tool_result(b: FieldReader) -> dict[str, Any]:
    content = b.get("content", ("str", "list"), "")
    text = content if isinstance(content, str) else _texts(content, b.path("content"))
    if b.get("is_error", "bool", False):
        text = f"Error: {text}"
    b.get("cache_control", "object")
    return {"role": "tool", "tool_call_id": b.get("tool_use_id", "str", required=True), "content": text}


def _tool(item: Any, i: int) -> dict[str, Any]:
    path = f"tools[{i}]"
    if not isinstance(item, dict):
        raise bad_request(f"'{path}' must be an object", param=path, code="invalid_type")
    r = FieldReader(item, path)
    kind = r.get("type", "str", "custom")
    if kind != "custom":
        raise bad_request(f"'{path}.type' {kind!r} is not supported: only custom tools (name, input_schema) "
                          "run here", param=f"{path}.type", code="unsupported_value")
    fn = {"name": r.get("name", "str", required=True), "parameters": r.get("input_schema", "object", required=True)}
    if r.get("description", "str") is not None:
        fn["description"] = item["description"]
    r.get("cache_control", "object")
    r.reject_unknown()
    return {"type": "function", "function": fn}


def _tool_choice(r: FieldReader, chat: dict[str, Any]) -> None:
    raw = r.get("tool_choice", "object")
    if raw is None:
        return
    sub = r.sub(raw, "tool_choice")
    kind = sub.get("type", "str", required=True, choices=("auto", "any", "tool", "none"))
    name = sub.get("name", "str", required=kind == "tool")
    if sub.get("disable_parallel_tool_use", "bool", False):
        chat["parallel_tool_calls"] = False
    sub.reject_unknown()
    chat["tool_choice"] = {"type": "function", "function": {"name": name}} if kind == "tool" else _CHOICES[kind]


def _thinking(r: FieldReader, chat: dict[str, Any]) -> bool:
    """``thinking`` onto ``enable_thinking``; True when its ``display`` is ``omitted``."""
    raw = r.get("thinking", "object")
    if raw is None:
        return False
    sub = r.sub(raw, "thinking")
    kind = sub.get("type", "str", required=True, choices=tuple(THINKING_ON))
    budget = sub.get("budget_tokens", "int", lo=1)
    display = sub.get("display", "str", choices=("summarized", "omitted"))
    sub.reject_unknown()
    chat["chat_template_kwargs"] = {"enable_thinking": THINKING_ON[kind]}
    if budget is not None and "thinking.budget_tokens" not in r.unknown.names:  # it shares max_tokens
        r.unknown.names.append("thinking.budget_tokens")
    return display == "omitted"


def _output_config(r: FieldReader, chat: dict[str, Any]) -> None:
    """``output_config``: ``format`` (``{"type": "json_schema", "schema"}``) constrains the answer;
    ``effort`` is the reasoning effort."""
    raw = r.get("output_config", "object")
    if raw is None:
        return
    sub = r.sub(raw, "output_config")
    effort = sub.get("effort", "str", choices=tuple(EFFORTS))
    if effort is not None:
        chat["reasoning_effort"] = EFFORTS[effort]
    fmt = sub.get("format", "object")
    if fmt is not None:
        f = sub.sub(fmt, "format")
        f.get("type", "str", required=True, choices=("json_schema",))
        schema = f.get("schema", "object", required=True)
        f.reject_unknown()
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema,
                                                                          "strict": True}}
    sub.reject_unknown()
