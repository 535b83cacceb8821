"""Ollama's API: ``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``, ``/api/ps``, ``/api/version``
(``/api/embed``: :mod:`.embeddings_api`).

Chat and generate (:mod:`.ollama_request`) run as one chat choice (:mod:`.chat_pipeline`); they
stream by default, as NDJSON lines (``"done": false`` deltas, then one ``"done": true`` line with
``done_reason`` -- ``stop`` or ``length`` -- and the counts ``prompt_eval_count`` / ``eval_count``);
``"stream": false`` answers one object. Tool calls come in ``message.tool_calls`` with their
arguments as an object (streamed: one line per complete call), the thinking in
``message.thinking`` (``thinking`` on generate). Durations are nanoseconds measured here, as
Ollama reports them: ``load_duration`` from the request's arrival to the engine request (the model is
resident: this is parsing, the template and tokenizing), ``prompt_eval_duration`` from there to the
first generated token, ``eval_duration`` from it to the last, ``total_duration`` the whole request.
``suffix`` on ``/api/generate`` is fill-in-the-middle (:func:`.model_facts.fim_prompt`; a 400 for a
model without its tokens). ``/api/tags``, ``/api/show`` and ``/api/ps`` describe the served model
(:mod:`.model_facts`). Errors are ``{"error": "..."}``, whatever failed (the app's error middleware
answers the same shape for ``/api/`` paths: 401, 404, 405).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from datetime import datetime, timezone
from typing import Any

from aiohttp import web
from radixlm.runtime.server.chat_generation import ChoiceEvent
from radixlm.runtime.server.chat_pipeline import ChatTurn, gather, start_chat, start_raw
from radixlm.runtime.server.event_stream import NDJSON_TYPE, ndjson_line, write_events
from radixlm.runtime.server.field_names import with_route_names
from radixlm.runtime.server.http_errors import APIError, bad_request, from_exception
from radixlm.runtime.server.model_facts import fim_markers, fim_prompt, model_facts, parameter_size
from radixlm.runtime.server.ollama_request import (
    GENERATE_PARAMS,
    PARAMS,
    OllamaRequest,
    parse_chat,
    parse_generate,
)
from radixlm.runtime.server.state import RequestRecord, ServerState

from radixlm import __version__

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OLLAMA_PREFIX = "/api/"
KEEP_ALIVE_S = 3650 * 86400  # /api/ps's expires_at: the model is never unloaded
OLLAMA_NAMES: dict[str, tuple[str, ...]] = {"max_new_tokens": ("options.num_predict",), "stop": ("options.stop",)}
_DONE = {"length": "length", "abort": "abort"}  # other finishes (stop, tool calls): stop


def ollama_errors(handler: Handler) -> Handler:
    """``handler`` whose failures answer Ollama's ``{"error": "..."}`` (same status)."""
    async def shaped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except Exception as e:  # noqa: BLE001 - every failure becomes this API's error body
            err = from_exception(e)
            return web.json_response({"error": err.message}, status=err.status, headers=err.headers())

    return shaped


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


class _Clock:
    """One request's phases, for Ollama's durations: submitted, first event, last event."""

    def __init__(self, record: RequestRecord):
        self.start = record.start
        self.submitted = self.last = time.perf_counter()
        self.first: float | None = None

    async def timed(self, events: AsyncIterator[ChoiceEvent]) -> AsyncIterator[ChoiceEvent]:
        """``events``, stamping the first and the last."""
        self.submitted = time.perf_counter()
        async with aclosing(events) as inner:
            async for ev in inner:
                self.last = time.perf_counter()
                if self.first is None and ev.kind != "finish":
                    self.first = self.last
                yield ev

    def durations(self) -> dict[str, int]:
        first = self.first if self.first is not None else self.last
        ns = lambda a, b: max(int((b - a) * 1e9), 0)  # noqa: E731
        return {"total_duration": ns(self.start, time.perf_counter()), "load_duration": ns(self.start, self.submitted),
                "prompt_eval_duration": ns(self.submitted, first), "eval_duration": ns(first, self.last)}


def _license(model_path: str) -> str:
    """The checkpoint folder's ``LICENSE`` text ("" without one)."""
    for name in ("LICENSE", "LICENSE.txt", "LICENSE.md"):
        path = os.path.join(model_path, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read(65536)
    return ""


def _arguments(text: str) -> dict[str, Any]:
    value = json.loads(text) if text.strip() else {}
    return value if isinstance(value, dict) else {"value": value}


class OllamaRoutes:
    """Ollama's routes; ``register`` adds them to an application."""

    def __init__(self, state: ServerState):
        self.state = state

    def register(self, app: web.Application) -> None:
        app.router.add_post("/api/chat", ollama_errors(with_route_names(self.chat, OLLAMA_NAMES)))
        app.router.add_post("/api/generate", ollama_errors(with_route_names(self.generate, OLLAMA_NAMES)))
        app.router.add_get("/api/tags", ollama_errors(self.tags))
        app.router.add_post("/api/show", ollama_errors(self.show))
        app.router.add_get("/api/ps", ollama_errors(self.ps))
        app.router.add_get("/api/version", ollama_errors(self.version))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        async with self.state.track("/api/chat") as record:
            req = parse_chat(await self.state.read_json(request), self.state.strict)
            return await self._answer(request, req, record, "message")

    async def generate(self, request: web.Request) -> web.StreamResponse:
        async with self.state.track("/api/generate") as record:
            req = parse_generate(await self.state.read_json(request), self.state.strict)
            if not req.prompt:  # Ollama's "load the model" request: it is loaded
                self.state.check_model(req.model)
                return web.json_response({"model": self.state.model_name, "created_at": _now(), "response": "",
                                          "done": True, "done_reason": "load"}, headers=req.ignored.report("/api/generate"))
            return await self._answer(request, req, record, "response")

    async def _answer(self, request: web.Request, req: OllamaRequest, record: RequestRecord,
                      shape: str) -> web.StreamResponse:
        """Run ``req``; ``shape`` is ``message`` (chat) or ``response`` (generate)."""
        self.state.check_model(req.model)
        headers = req.ignored.report(request.path)
        if req.suffix is not None:
            prompt = fim_prompt(self.state.tokenizer, req.prompt or "", req.suffix)
            turn = await start_raw(self.state, request, record, req.chat, PARAMS, prompt, "prompt")
        elif req.raw:
            turn = await start_raw(self.state, request, record, req.chat, PARAMS, req.prompt or "", "prompt")
        else:
            turn = await start_chat(self.state, request, record, req.chat,
                                    GENERATE_PARAMS if shape == "response" else PARAMS)
        clock = _Clock(record)
        if req.stream:
            on_error = lambda err: ndjson_line({"error": err.message})  # noqa: E731
            return await write_events(request, self._lines(turn, record, shape, clock), NDJSON_TYPE, on_error,
                                      headers)
        answer = await gather(clock.timed(turn.events()))  # a call the budget cut off is not in answer.calls
        if shape == "message":
            body: dict[str, Any] = {"message": {"role": "assistant", "content": answer.content}}
            if answer.reasoning:
                body["message"]["thinking"] = answer.reasoning
            if answer.calls:
                body["message"]["tool_calls"] = [{"function": {"name": c.name, "arguments": _arguments(c.arguments)}}
                                                 for c in answer.calls]
        else:
            body = {"response": answer.content, **({"thinking": answer.reasoning} if answer.reasoning else {})}
        return web.json_response({"model": self.state.model_name, "created_at": _now(), **body,
                                  **self._done(record, answer.finish.finish_reason, clock)}, headers=headers)

    def _done(self, record: RequestRecord, finish: str | None, clock: _Clock) -> dict[str, Any]:
        return {"done": True, "done_reason": _DONE.get(finish or "stop", "stop"), **clock.durations(),
                "prompt_eval_count": record.prompt, "eval_count": record.completion}

    async def _lines(self, turn: ChatTurn, record: RequestRecord, shape: str, clock: _Clock) -> AsyncIterator[bytes]:
        call: dict[str, Any] | None = None  # the call being generated, sent whole once complete

        def line(**fields: Any) -> bytes:
            if shape == "message":
                msg = {"role": "assistant", "content": fields.pop("content", "")}
                msg.update((k, fields.pop(k)) for k in ("thinking", "tool_calls") if k in fields)
                fields["message"] = msg
            elif "content" in fields:
                fields["response"] = fields.pop("content")
            return ndjson_line({"model": self.state.model_name, "created_at": _now(), **fields})

        def flush() -> list[bytes]:
            nonlocal call
            done, call = call, None
            if done is None or shape != "message":
                return []
            return [line(tool_calls=[{"function": {"name": done["name"], "arguments": _arguments(done["args"])}}],
                         done=False)]

        async with aclosing(clock.timed(turn.events())) as events:
            async for ev in events:
                if ev.kind == "content" and ev.text:
                    yield line(content=ev.text, done=False)
                elif ev.kind == "reasoning" and ev.text:
                    yield line(thinking=ev.text, done=False)
                elif ev.kind == "call_start":
                    for out in flush():
                        yield out
                    call = {"name": ev.name or "", "args": ""}
                elif ev.kind == "call_args" and call is not None:
                    call["args"] += ev.text
                elif ev.kind == "finish":
                    if ev.cut_call is not None:
                        call = None  # cut off by the budget: not a complete call
                    for out in flush():
                        yield out
                    yield line(content="", **self._done(record, ev.finish_reason, clock))

    async def tags(self, request: web.Request) -> web.Response:
        return web.json_response({"models": [self._model_entry()]})

    def _model_entry(self) -> dict[str, Any]:
        facts = model_facts(self.state)
        return {"name": facts.name, "model": facts.name, "modified_at": facts.modified_at, "size": facts.size_bytes,
                "details": self._details(facts)}

    def _details(self, facts: Any) -> dict[str, Any]:
        return {"parent_model": "", "format": facts.format, "family": facts.family, "families": [facts.family],
                "parameter_size": parameter_size(facts.parameter_count), "quantization_level": facts.quantization}

    async def show(self, request: web.Request) -> web.Response:
        body = await self.state.read_json(request)
        model = body.get("model") or body.get("name")
        if not isinstance(model, str):
            raise bad_request("missing required field 'model'", param="model", code="missing_field")
        try:
            self.state.check_model(model.removesuffix(":latest"))
        except APIError:
            raise APIError(404, f"model '{model}' not found; this server serves '{self.state.model_name}'",
                           param="model", code="model_not_found") from None
        facts = model_facts(self.state)
        arch = facts.family
        info: dict[str, Any] = {"general.architecture": arch, "general.basename": facts.name,
                                f"{arch}.context_length": facts.context_len}
        if facts.parameter_count is not None:
            info["general.parameter_count"] = facts.parameter_count
        for key, name in (("hidden_size", "embedding_length"), ("num_layers", "block_count"),
                          ("num_heads", "attention.head_count"), ("num_kv_heads", "attention.head_count_kv"),
                          ("intermediate_size", "feed_forward_length"), ("vocab_size", "vocab_size")):
            if key in facts.shapes:
                info[f"{arch}.{name}"] = facts.shapes[key]
        template = self.state.tokenizer.chat_template or ""
        caps = ["completion", "tools"] + (["insert"] if fim_markers(self.state.tokenizer) else []) + \
            (["thinking"] if self.state.reasoning_format is not None else [])
        return web.json_response({
            "license": _license(self.state.model_path),
            "modelfile": f"FROM {self.state.model_path}\nPARAMETER num_ctx {facts.context_len}\n",
            "parameters": f"num_ctx {facts.context_len}", "template": template, "details": self._details(facts),
            "model_info": info, "capabilities": caps, "modified_at": facts.modified_at})

    async def ps(self, request: web.Request) -> web.Response:
        """The running models: the served one, resident for as long as the server runs."""
        entry = self._model_entry()
        expires = datetime.fromtimestamp(self.state.started_at + KEEP_ALIVE_S, timezone.utc)
        on_gpu = str(self.state.engine.server_args.device).startswith("cuda")  # "auto" counts as CPU here
        entry.update(digest=hashlib.sha256(f"{self.state.model_path}@{entry['modified_at']}".encode()).hexdigest(),
                     expires_at=expires.isoformat().replace("+00:00", "Z"), size_vram=entry["size"] if on_gpu else 0,
                     context_length=self.state.context_len)
        return web.json_response({"models": [entry]})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": __version__})
