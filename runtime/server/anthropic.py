"""Anthropic's Messages API (``/v1/messages``) on the chat pipeline: its request and its route.

``POST /v1/messages`` bodies (Anthropic's Messages API): checked, then written as a chat-completions body.

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

``POST /v1/messages``: Anthropic's Messages API as a translation onto the chat pipeline.

The body (this module's request parser) runs as one chat choice; its events become content blocks
(``thinking``, ``text``, ``tool_use`` with the arguments parsed into ``input``) and, streamed,
Anthropic's events: ``message_start``, per block ``content_block_start`` / ``content_block_delta``
(``thinking_delta``, ``text_delta``, ``input_json_delta``) / ``content_block_stop``, then
``message_delta`` (the stop reason and usage) and ``message_stop``. ``stop_reason``: ``end_turn``,
``max_tokens``, ``stop_sequence`` (with ``stop_sequence``), ``tool_use``; ``pause_turn`` when the
generation was aborted (``/abort_request``), so the client may continue the turn. ``usage``:
``input_tokens`` is the prompt's uncached part, ``cache_read_input_tokens`` its radix-cache hit.
Errors have Anthropic's shape, ``{"type": "error", "error": {"type", "message"}}``, whatever failed
(the app's error middleware answers the same shape on these paths: 401, 404, 405, 415).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from radixlm.runtime.server.chat.pipeline import (
    Answer,
    ChatTurn,
    ChoiceEvent,
    ParamMap,
    collect,
    new_id,
    start_chat,
)
from radixlm.runtime.server.transport.body import (
    FieldReader,
    UnknownFields,
    anthropic_error,
    bad_request,
    check_str_list,
    shaped_errors,
    with_route_names,
)
from radixlm.runtime.server.transport.sse import SSE_TYPE, named_event, write_events
from radixlm.runtime.server.transport.state import RequestRecord, ServerState

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


ANTHROPIC_NAMES: dict[str, tuple[str, ...]] = {"max_new_tokens": ("max_tokens",), "stop": ("stop_sequences",)}
_STOP = {"length": "max_tokens", "tool_calls": "tool_use", "abort": "pause_turn"}






def stop_reason(finish: str | None, matched: str | None) -> str:
    """The chat finish as Anthropic's ``stop_reason``."""
    if finish == "stop":
        return "stop_sequence" if matched is not None else "end_turn"
    return _STOP.get(finish or "stop", "end_turn")


class AnthropicRoutes:
    """Anthropic's Messages API; ``register`` adds it to an application."""

    def __init__(self, state: ServerState):
        self.state = state

    def register(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", shaped_errors(with_route_names(self.create, ANTHROPIC_NAMES)))
        app.router.add_post("/v1/messages/count_tokens", shaped_errors(self.count_tokens))

    async def count_tokens(self, request: web.Request) -> web.Response:
        """``{"input_tokens"}``: the prompt's tokens once the messages, system and tools are rendered."""
        async with self.state.track("/v1/messages/count_tokens") as record:
            body = await self.state.read_json(request)
            if isinstance(body, dict):  # count_tokens takes no max_tokens; the parser wants one
                body = {**body, "max_tokens": 1}
            req = parse_messages_request(body, self.state.strict)
            self.state.check_model(req.model)
            turn = await start_chat(self.state, request, record, req.chat, PARAMS)
            return web.json_response({"input_tokens": len(turn.plan.prompt_ids)},
                                     headers=req.ignored.report("/v1/messages/count_tokens"))

    async def create(self, request: web.Request) -> web.StreamResponse:
        async with self.state.track("/v1/messages") as record:
            req = parse_messages_request(await self.state.read_json(request), self.state.strict)
            self.state.check_model(req.model)
            headers = req.ignored.report("/v1/messages")
            turn = await start_chat(self.state, request, record, req.chat, PARAMS)
            mid = new_id("msg").replace("-", "_")
            if req.stream:
                on_error = lambda err: named_event("error", anthropic_error(err))  # noqa: E731
                return await write_events(request, self._stream(turn, req, record, mid), SSE_TYPE, on_error,
                                          headers)
            answer = await collect(turn)
            blocks: list[dict[str, Any]] = []
            if answer.reasoning:
                blocks.append({"type": "thinking", "thinking": "" if req.omit_thinking else answer.reasoning,
                               "signature": ""})
            if answer.content or not answer.calls:
                blocks.append({"type": "text", "text": answer.content})
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)}
                       for c in answer.calls]
            return web.json_response({**self._message(mid, req, record, answer), "content": blocks},
                                     headers=headers)

    def _message(self, mid: str, req: MessagesRequest, record: RequestRecord, answer: Answer | None) -> dict:
        done = answer is not None
        usage = {"input_tokens": record.prompt - record.cached, "output_tokens": record.completion,
                 "cache_read_input_tokens": record.cached, "cache_creation_input_tokens": 0}
        return {"id": mid, "type": "message", "role": "assistant", "model": self.state.model_name, "content": [],
                "stop_reason": stop_reason(answer.finish_reason, answer.stop_matched) if done else None,
                "stop_sequence": answer.stop_matched if done else None, "usage": usage}

    async def _stream(self, turn: ChatTurn, req: MessagesRequest, record: RequestRecord,
                      mid: str) -> AsyncIterator[bytes]:
        blocks = _Blocks(req.omit_thinking)
        async with aclosing(turn.events()) as events:
            try:
                first = await anext(events)  # an engine error before any output is still an HTTP error
            except StopAsyncIteration:
                return
            start = self._message(mid, req, record, None)
            start["usage"]["input_tokens"] = len(turn.plan.prompt_ids)  # the cache hit is known at the end
            yield named_event("message_start", {"type": "message_start", "message": start})
            ev: ChoiceEvent | None = first
            while ev is not None:
                if ev.kind == "finish":
                    for out in blocks.close():
                        yield out
                    final = self._message(mid, req, record, Answer(finish_reason=ev.finish_reason or "stop",
                                                                   stop_matched=ev.stop_matched))
                    delta = {"stop_reason": final["stop_reason"], "stop_sequence": final["stop_sequence"]}
                    yield named_event("message_delta", {"type": "message_delta", "delta": delta,
                                                        "usage": final["usage"]})
                    yield named_event("message_stop", {"type": "message_stop"})
                else:
                    for out in blocks.feed(ev):
                        yield out
                ev = await anext(events, None)


class _Blocks:
    """Content blocks opened and closed as a choice's events arrive (Anthropic's streaming order)."""

    def __init__(self, omit_thinking: bool = False) -> None:
        self.index = -1
        self.kind: str | None = None  # the open block's type
        self.omit_thinking = omit_thinking  # thinking blocks opened and closed, their text not sent

    def feed(self, ev: ChoiceEvent) -> list[bytes]:
        if ev.kind in ("content", "reasoning"):
            if not ev.text:
                return []
            kind = "text" if ev.kind == "content" else "thinking"
            opened = self._open(kind, {"type": "text", "text": ""} if kind == "text" else
                                {"type": "thinking", "thinking": "", "signature": ""}) if self.kind != kind else []
            if kind == "thinking" and self.omit_thinking:
                return opened
            delta = {"type": "text_delta", "text": ev.text} if kind == "text" else \
                {"type": "thinking_delta", "thinking": ev.text}
            return opened + [self._delta(delta)]
        if ev.kind == "call_start":
            return self._open("tool_use", {"type": "tool_use", "id": ev.call_id or "", "name": ev.name or "",
                                           "input": {}})
        return [self._delta({"type": "input_json_delta", "partial_json": ev.text})] if ev.text else []

    def _open(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        out = self.close()
        self.index, self.kind = self.index + 1, kind
        return out + [named_event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                          "content_block": block})]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return named_event("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                   "delta": delta})

    def close(self) -> list[bytes]:
        if self.kind is None:
            return []
        self.kind = None
        return [named_event("content_block_stop", {"type": "content_block_stop", "index": self.index})]


def _input(arguments: str) -> dict[str, Any]:
    """A complete call's arguments (JSON text generated under the tool's schema) as ``input``."""
    value = json.loads(arguments) if arguments.strip() else {}
    return value if isinstance(value, dict) else {"value": value}
