"""``POST /v1/messages``: Anthropic's Messages API as a translation onto the chat pipeline.

The body (:mod:`.anthropic_request`) runs as one chat choice; its events become content blocks
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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

from aiohttp import web
from radixlm.runtime.server.anthropic_request import PARAMS, MessagesRequest, parse_messages_request
from radixlm.runtime.server.chat_generation import ChoiceEvent
from radixlm.runtime.server.chat_pipeline import Answer, ChatTurn, collect, start_chat
from radixlm.runtime.server.event_stream import SSE_TYPE, named_event, write_events
from radixlm.runtime.server.field_names import with_route_names
from radixlm.runtime.server.http_errors import APIError, from_exception
from radixlm.runtime.server.openai_responses import new_id
from radixlm.runtime.server.state import RequestRecord, ServerState

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ANTHROPIC_NAMES: dict[str, tuple[str, ...]] = {"max_new_tokens": ("max_tokens",), "stop": ("stop_sequences",)}
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                503: "overloaded_error"}
_STOP = {"length": "max_tokens", "tool_calls": "tool_use", "abort": "pause_turn"}


def anthropic_error(err: APIError) -> dict[str, Any]:
    """Anthropic's error body for ``err``."""
    kind = _ERROR_TYPES.get(err.status, "invalid_request_error" if err.status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def anthropic_errors(handler: Handler) -> Handler:
    """``handler`` whose failures answer in Anthropic's error shape (same status)."""
    async def shaped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except Exception as e:  # noqa: BLE001 - every failure becomes this API's error body
            err = from_exception(e)
            return web.json_response(anthropic_error(err), status=err.status, headers=err.headers())

    return shaped


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
        app.router.add_post("/v1/messages", anthropic_errors(with_route_names(self.create, ANTHROPIC_NAMES)))
        app.router.add_post("/v1/messages/count_tokens", anthropic_errors(self.count_tokens))

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
