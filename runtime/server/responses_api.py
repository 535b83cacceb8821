"""``POST /v1/responses``: OpenAI's Responses API, stateless, as a translation onto the chat pipeline.

The body is checked and written as a chat-completions body (:mod:`.responses_request`), which runs
as one chat choice (:mod:`.chat_pipeline`); its events become output items and, streamed, the
Responses events (:mod:`.responses_events`): ``response.created``, ``response.in_progress``, the
items' events, then ``response.completed`` -- or ``response.incomplete`` with ``status:
"incomplete"`` and ``incomplete_details.reason: "max_output_tokens"`` when the output budget ended
the answer. ``usage`` holds the real counts: ``input_tokens_details.cached_tokens`` is the prompt's
radix-cache hit, ``output_tokens_details.reasoning_tokens`` the thinking's tokens. Nothing is
stored (``store: false``): ``GET /v1/responses/{id}`` and ``previous_response_id`` say so with a
404 / 400. Errors have OpenAI's shape and name the field as the request wrote it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from aiohttp import web
from radixlm.runtime.server.chat_pipeline import ChatTurn, count_tokens, start_chat
from radixlm.runtime.server.event_stream import SSE_TYPE, named_event, write_events
from radixlm.runtime.server.field_names import with_route_names
from radixlm.runtime.server.http_errors import APIError
from radixlm.runtime.server.responses_events import ResponseBuilder, item_id
from radixlm.runtime.server.responses_request import PARAMS, ResponsesRequest, parse_responses_request
from radixlm.runtime.server.state import RequestRecord, ServerState

# engine field -> the Responses field that sets it (errors raised below the route)
RESPONSES_NAMES: dict[str, tuple[str, ...]] = {"max_new_tokens": ("max_output_tokens",)}
_STATUS = {"length": "incomplete", "abort": "cancelled"}  # other finishes: completed


class ResponsesRoutes:
    """The Responses API's handlers; ``register`` adds them to an application."""

    def __init__(self, state: ServerState):
        self.state = state

    def register(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", with_route_names(self.create, RESPONSES_NAMES))
        app.router.add_get("/v1/responses/{response_id}", self.retrieve)

    async def retrieve(self, request: web.Request) -> web.Response:
        raise APIError(404, f"response {request.match_info['response_id']!r} is not stored: this server "
                       "keeps no responses (it is stateless)", param="response_id", code="not_found")

    async def create(self, request: web.Request) -> web.StreamResponse:
        async with self.state.track("/v1/responses") as record:
            req = parse_responses_request(await self.state.read_json(request), self.state.strict)
            self.state.check_model(req.chat.get("model"))
            headers = req.ignored.report("/v1/responses")
            turn = await start_chat(self.state, request, record, req.chat, PARAMS)
            answer = _Answer(self.state, req, record)
            if req.stream:
                return await write_events(request, self._stream(turn, answer), SSE_TYPE, answer.error_event,
                                          headers)
            async for ev in turn.events():
                answer.builder.feed(ev)
                if ev.kind == "finish":
                    answer.finish = ev.finish_reason or "stop"
            return web.json_response(answer.response(), headers=headers)

    async def _stream(self, turn: ChatTurn, answer: _Answer) -> AsyncIterator[bytes]:
        b = answer.builder
        async with aclosing(turn.events()) as events:
            try:
                first = await anext(events)  # an engine error before any output is still an HTTP error
            except StopAsyncIteration:
                first = None
            yield named_event("response.created", b.event("response.created", response=answer.response()))
            yield named_event("response.in_progress", b.event("response.in_progress", response=answer.response()))
            async for ev in _chain([first] if first is not None else [], events):
                if ev.kind == "finish":
                    answer.finish = ev.finish_reason or "stop"
                for out in b.feed(ev):
                    yield named_event(out["type"], out)
        kind = "response.completed" if answer.status == "completed" else "response.incomplete"
        yield named_event(kind, b.event(kind, response=answer.response()))


class _Answer:
    """One response being built: its id, the builder, the finish, and its object as sent."""

    def __init__(self, state: ServerState, req: ResponsesRequest, record: RequestRecord):
        self.state, self.req, self.record = state, req, record
        self.id = item_id("resp")
        self.created = int(time.time())
        self.builder = ResponseBuilder(req.logprobs)
        self.finish: str | None = None  # None while generating

    @property
    def status(self) -> str:
        return "in_progress" if self.finish is None else _STATUS.get(self.finish, "completed")

    def response(self) -> dict[str, Any]:
        """The response object: in progress (no usage yet) until the finish is known."""
        status, r = self.status, self.record
        usage = None
        if self.finish is not None:
            thought = "".join(p["text"] for item in self.builder.output if item["type"] == "reasoning"
                              for p in item["content"])
            usage = {"input_tokens": r.prompt, "input_tokens_details": {"cached_tokens": r.cached},
                     "output_tokens": r.completion,
                     "output_tokens_details": {"reasoning_tokens": count_tokens(self.state, thought)},
                     "total_tokens": r.prompt + r.completion}
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                "model": self.state.model_name, "output": [dict(i) for i in self.builder.output],
                "previous_response_id": None, "store": False, **self.req.echo, "usage": usage}

    def error_event(self, err: APIError) -> bytes:
        """A failure after the stream started: Responses' ``error`` event."""
        return named_event("error", self.builder.event("error", code=err.code, message=err.message,
                                                       param=err.param))


async def _chain(first: list, rest: AsyncIterator) -> AsyncIterator:
    for item in first:
        yield item
    async for item in rest:
        yield item
