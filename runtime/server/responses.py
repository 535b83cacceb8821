"""OpenAI's Responses API (``/v1/responses``) on the chat pipeline: its request, its output items and events,
its route.

``POST /v1/responses`` bodies: checked, then written as the equivalent chat-completions body.

The Responses API is served statelessly: ``input`` (text, or items: messages, ``function_call``,
``function_call_output``, ``reasoning``) holds the whole conversation and ``instructions`` becomes
the system message. ``previous_response_id``, ``background`` and ``item_reference`` items need
stored responses, so they are a 400 that says so. Function tools map onto the chat route's tools,
``text.format`` onto ``response_format``, ``reasoning.effort`` onto the chat template's
``reasoning_effort``, ``prompt_cache_key`` onto the radix-cache salt. Errors name the field as the
request wrote it (``input[2].content[0].type``, ``text.format.schema``).

The Responses API's output, built from a chat choice's events: output items and streaming events.

:class:`ResponseBuilder` reads :class:`~radixlm.runtime.server.chat.pipeline.ChoiceEvent` in order
and keeps the ``output`` items (``reasoning``, ``message``, ``function_call``); each ``feed`` returns
the streaming events it causes, in the order OpenAI sends them::

    response.output_item.added -> response.content_part.added -> response.output_text.delta ...
    -> response.output_text.done -> response.content_part.done -> response.output_item.done
    (reasoning: response.reasoning_text.delta / .done; a call: response.function_call_arguments.delta
    / .done). ``sequence_number`` counts every event of the stream, ``response.created`` first.

The non-streamed route feeds the same events and drops the streaming ones, so both answers hold
the same items.

``POST /v1/responses``: OpenAI's Responses API, stateless, as a translation onto the chat pipeline.

The body is checked and written as a chat-completions body (this module's request parser), which runs
as one chat choice (:mod:`.chat.pipeline`); its events become output items and, streamed, the
Responses events (:class:`ResponseBuilder`): ``response.created``, ``response.in_progress``, the
items' events, then ``response.completed`` -- or ``response.incomplete`` with ``status:
"incomplete"`` and ``incomplete_details.reason: "max_output_tokens"`` when the output budget ended
the answer. ``usage`` holds the real counts: ``input_tokens_details.cached_tokens`` is the prompt's
radix-cache hit, ``output_tokens_details.reasoning_tokens`` the thinking's tokens. Nothing is
stored (``store: false``): ``GET /v1/responses/{id}`` and ``previous_response_id`` say so with a
404 / 400. Errors have OpenAI's shape and name the field as the request wrote it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from radixlm.runtime.server.chat.pipeline import ChatTurn, ChoiceEvent, ParamMap, count_tokens, start_chat
from radixlm.runtime.server.transport.body import (
    APIError,
    FieldReader,
    UnknownFields,
    bad_request,
    with_route_names,
)
from radixlm.runtime.server.transport.sse import SSE_TYPE, named_event, write_events
from radixlm.runtime.server.transport.state import RequestRecord, ServerState

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
            "temperature": chat.get("temperature"), "top_p": chat.get("top_p"),
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


def item_id(prefix: str) -> str:
    """An output item id: ``msg_...``, ``fc_...``, ``rs_...``."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class ResponseBuilder:
    """The output items of one response and the streaming events that build them."""

    def __init__(self, logprobs: bool = False):
        self.logprobs = logprobs
        self.output: list[dict[str, Any]] = []
        self.seq = 0
        self.open: dict[str, Any] | None = None  # the item being written (last of ``output``)
        self.texts: list[str] = []  # the open item's text (or arguments) so far
        self.lps: list[dict[str, Any]] = []

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        """One streaming event, numbered."""
        out = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return out

    def feed(self, ev: ChoiceEvent) -> list[dict[str, Any]]:
        """The streaming events of ``ev`` (a finish closes the open item; the caller ends the stream)."""
        if ev.kind == "content":
            if not ev.text and not ev.logprobs:
                return []
            out = self._ensure("message")
            self.texts.append(ev.text)
            lps = list(ev.logprobs or []) if self.logprobs else []
            self.lps += lps
            return out + [self.event("response.output_text.delta", **self._where(), delta=ev.text, logprobs=lps)]
        if ev.kind == "reasoning":
            out = self._ensure("reasoning")
            self.texts.append(ev.text)
            return out + [self.event("response.reasoning_text.delta", **self._where(), delta=ev.text)]
        if ev.kind == "call_start":
            out = self.close()
            self.open = {"type": "function_call", "id": item_id("fc"), "call_id": ev.call_id or item_id("call"),
                         "name": ev.name or "", "arguments": "", "status": "in_progress"}
            return out + self._add()
        if ev.kind == "call_args":
            self.texts.append(ev.text)
            return [self.event("response.function_call_arguments.delta", item_id=self.open["id"],
                               output_index=len(self.output) - 1, delta=ev.text)]
        return self.close(incomplete=ev.finish_reason == "length")  # a call the budget cut is never sent

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.open["id"], "output_index": len(self.output) - 1, "content_index": 0}

    def _ensure(self, kind: str) -> list[dict[str, Any]]:
        """Open an item of ``kind`` unless one is open (closing another kind first)."""
        if self.open is not None and self.open["type"] == kind:
            return []
        out = self.close()
        if kind == "message":
            self.open = {"type": "message", "id": item_id("msg"), "status": "in_progress", "role": "assistant",
                         "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            self.open = {"type": "reasoning", "id": item_id("rs"), "summary": [], "content": [],
                         "status": "in_progress"}
            part = {"type": "reasoning_text", "text": ""}
        return out + self._add() + [self.event("response.content_part.added", **self._where(), part=part)]

    def _add(self) -> list[dict[str, Any]]:
        self.output.append(self.open)
        self.texts, self.lps = [], []
        return [self.event("response.output_item.added", output_index=len(self.output) - 1, item=dict(self.open))]

    def close(self, incomplete: bool = False) -> list[dict[str, Any]]:
        """Finish the open item (``incomplete``: the budget ended it); its ``.done`` events."""
        item, text = self.open, "".join(self.texts)
        if item is None:
            return []
        self.open = None
        index = len(self.output) - 1
        where = {"item_id": item["id"], "output_index": index}
        out: list[dict[str, Any]] = []
        if item["type"] == "function_call":
            item.update(arguments=text, status="completed")
            out.append(self.event("response.function_call_arguments.done", **where, name=item["name"],
                                  arguments=text))
        elif item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": self.lps}
            item.update(content=[part], status="incomplete" if incomplete else "completed")
            out += [self.event("response.output_text.done", **where, content_index=0, text=text, logprobs=self.lps),
                    self.event("response.content_part.done", **where, content_index=0, part=part)]
        else:
            part = {"type": "reasoning_text", "text": text}
            item.update(content=[part], status="incomplete" if incomplete else "completed")
            out += [self.event("response.reasoning_text.done", **where, content_index=0, text=text),
                    self.event("response.content_part.done", **where, content_index=0, part=part)]
        return out + [self.event("response.output_item.done", output_index=index, item=item)]


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
                "previous_response_id": None, "store": False, **self.req.echo, **self._sampling(),
                "usage": usage}

    def _sampling(self) -> dict[str, float]:
        """The temperature and top_p in effect: the request's, else the served model's defaults."""
        defaults = self.state.engine.sampling_defaults.values
        return {key: self.req.echo[key] if self.req.echo[key] is not None else float(defaults.get(key, 1.0))
                for key in ("temperature", "top_p")}

    def error_event(self, err: APIError) -> bytes:
        """A failure after the stream started: Responses' ``error`` event."""
        return named_event("error", self.builder.event("error", code=err.code, message=err.message,
                                                       param=err.param))


async def _chain(first: list, rest: AsyncIterator) -> AsyncIterator:
    for item in first:
        yield item
    async for item in rest:
        yield item
