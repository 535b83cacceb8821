"""The SGLang-native routes: ``/generate``, health, model and server info, cache, abort, metrics.

``POST /generate`` answers exactly what ``Engine.generate`` returns (a dict, or a list for a batch);
streamed, each SSE event is one incremental dict (``text`` is the new delta), with ``index`` for
batches, ending with ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.server.http_errors import APIError, bad_request, client_message
from radixlm.runtime.server.request_fields import FieldReader, check_token_ids, read_cache_salt
from radixlm.runtime.server.sse import gather_all, merge_streams, write_stream
from radixlm.runtime.server.state import RequestRecord, ServerState
from radixlm.runtime.server.tool_calls import error_pointer

from radixlm import __version__

_LOGPROB_KEYS = ("input_token_logprobs", "output_token_logprobs")
_TOP_LOGPROB_KEYS = ("input_top_logprobs", "output_top_logprobs")


@dataclass
class GenerateRequest:
    """A parsed ``/generate`` body; ``prompts`` hold text or token ids, one entry per batch item."""

    prompts: list[str | list[int]]
    is_batch: bool
    is_ids: bool
    sampling: list[dict[str, Any]]
    rids: list[str | None]
    stream: bool = False
    return_logprob: bool = False
    logprob_start_len: int | None = None
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    salt: str | None = None  # cache_salt / extra_key: the request's radix-cache namespace


def parse_generate_request(body: dict[str, Any]) -> GenerateRequest:
    """Validate a ``/generate`` body (400 naming the bad field)."""
    r = FieldReader(body)
    text = r.get("text", ("str", "list"))
    ids = r.get("input_ids", "list")
    if (text is None) == (ids is None):
        raise bad_request("exactly one of 'text' and 'input_ids' is required", param="text")
    if text is not None:
        is_batch = isinstance(text, list)
        prompts = text if is_batch else [text]
        for i, p in enumerate(prompts):
            if not isinstance(p, str) or not p:
                raise bad_request("'text' must be a non-empty string or a list of them",
                                  param=f"text[{i}]" if is_batch else "text", code="invalid_type")
    else:
        is_batch = bool(ids) and isinstance(ids[0], list)
        prompts = [check_token_ids(p, f"input_ids[{i}]") for i, p in enumerate(ids)] if is_batch \
            else [check_token_ids(ids, "input_ids")]
    n = len(prompts)
    sampling = _per_item(r.get("sampling_params", ("object", "list"), {}), n, "sampling_params")
    for i, sp in enumerate(sampling):
        try:
            SamplingParams.from_dict(sp)
        except (TypeError, ValueError) as e:  # a TypeError's text is Python's, not a reason for the client
            why = client_message(str(e)) if isinstance(e, ValueError) else "a field has the wrong type"
            where = "sampling_params" + (f"[{i}]" if is_batch else "")
            field = getattr(e, "field", None)
            raise bad_request(f"sampling_params: {why}", param=f"{where}.{field}" if field else where,
                              code="invalid_value") from None
    rid = r.get("rid", ("str", "list"))
    rids = _per_item(rid, n, "rid") if isinstance(rid, list) else [rid] * n
    if rid is not None and not isinstance(rid, list) and is_batch:
        rids = [f"{rid}-{i}" for i in range(n)]
    req = GenerateRequest(
        prompts, is_batch, text is None, sampling, rids,
        stream=r.get("stream", "bool", False),
        return_logprob=r.get("return_logprob", "bool", False),
        logprob_start_len=r.get("logprob_start_len", "int", lo=-1),
        top_logprobs_num=r.get("top_logprobs_num", "int", 0, lo=0, hi=100),
        return_text_in_logprobs=r.get("return_text_in_logprobs", "bool", False),
        salt=read_cache_salt(r),
    )
    if req.logprob_start_len == -1:
        req.logprob_start_len = None
    r.reject_unknown()
    return req


def _per_item(value: Any, n: int, param: str) -> list[Any]:
    """A per-request value: one shared value, or a list with one entry per batch item."""
    if not isinstance(value, list):
        return [value] * n
    if len(value) != n:
        raise bad_request(f"'{param}' has {len(value)} entries but the batch has {n} prompts", param=param)
    return value


class NativeRoutes:
    """Handlers of the native API; ``register`` adds them to an application."""

    def __init__(self, state: ServerState):
        self.state = state

    def register(self, app: web.Application) -> None:
        app.router.add_post("/generate", self.generate)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health_generate)
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_post("/flush_cache", self.flush_cache)
        app.router.add_post("/abort_request", self.abort_request)
        app.router.add_get("/metrics", self.metrics)

    # ------------------------------------------------------------------ /generate

    async def generate(self, request: web.Request) -> web.StreamResponse:
        async with self.state.track("/generate") as record:
            req = parse_generate_request(await self.state.read_json(request))
            extra_key = self.state.extra_key(request, req.salt)
            try:
                if req.stream:
                    return await write_stream(request, self._events(req, record, extra_key))
                results = await gather_all([self._one(req, i, record, extra_key)
                                            for i in range(len(req.prompts))])
            except ValueError as e:
                if error_pointer(e) is None:
                    raise
                raise APIError(400, f"sampling_params.json_schema: {client_message(str(e))}",
                               param="sampling_params.json_schema", code="unsupported_schema") from None
            return web.json_response(results if req.is_batch else results[0])

    def _kwargs(self, req: GenerateRequest, i: int, record: RequestRecord,
                extra_key: str | None) -> dict[str, Any]:
        prompt = req.prompts[i]
        return {
            "prompt": None if req.is_ids else prompt, "input_ids": prompt if req.is_ids else None,
            "sampling_params": req.sampling[i], "return_logprob": req.return_logprob,
            "logprob_start_len": req.logprob_start_len, "top_logprobs_num": req.top_logprobs_num,
            "rid": req.rids[i] or self.state.new_rid(record, f"-{i}"), "extra_key": extra_key,
        }

    async def _one(self, req: GenerateRequest, i: int, record: RequestRecord, extra_key: str | None) -> Any:
        kwargs = self._kwargs(req, i, record, extra_key)
        result = await self.state.generate(kwargs.pop("rid"), **kwargs)
        for item in result if isinstance(result, list) else [result]:
            record.add(item.get("meta_info", {}))
            if req.return_text_in_logprobs:
                add_logprob_text(item.get("meta_info", {}), self.state.tokenizer)
        return result

    async def _events(self, req: GenerateRequest, record: RequestRecord,
                      extra_key: str | None) -> AsyncIterator[dict]:
        streams = []
        for i in range(len(req.prompts)):
            kwargs = self._kwargs(req, i, record, extra_key)
            streams.append(self.state.stream(kwargs.pop("rid"), **kwargs))
        async with aclosing(merge_streams(streams)) as merged:
            async for i, chunk in merged:
                meta = chunk.get("meta_info", {})
                if meta.get("finish_reason") is not None:
                    record.add(meta)
                if req.return_text_in_logprobs:
                    add_logprob_text(meta, self.state.tokenizer)
                if req.is_batch:
                    chunk = {**chunk, "index": i}
                yield chunk

    # ------------------------------------------------------------------ the rest

    async def health(self, request: web.Request) -> web.Response:
        if self.state.draining:
            raise APIError(503, "the server is shutting down", code="shutting_down")
        return web.json_response({"status": "ok"})

    async def health_generate(self, request: web.Request) -> web.Response:
        """Runs a one-token generation through the whole engine."""
        start = time.perf_counter()
        async with self.state.track("/health_generate") as record:
            rid = self.state.new_rid(record, "-health")
            ids = [self.state.tokenizer.encode("Hi")[0]]
            result = await asyncio.wait_for(self.state.generate(
                rid, input_ids=ids, sampling_params={"max_new_tokens": 1, "temperature": 0.0}), 60)
            record.add(result.get("meta_info", {}))
        return web.json_response({"status": "ok", "latency_s": round(time.perf_counter() - start, 4)})

    async def model_info(self, request: web.Request) -> web.Response:
        cfg = self.state.engine.model_config
        return web.json_response({
            "model_path": self.state.model_path,
            "served_model_name": self.state.model_name,
            "tokenizer_path": self.state.engine.server_args.tokenizer_path or self.state.model_path,
            "is_generation": True,
            "context_length": self.state.context_len,
            "architecture": getattr(cfg, "architecture", None),
            "vocab_size": getattr(cfg, "vocab_size", None),
        })

    async def server_info(self, request: web.Request) -> web.Response:
        cfg = self.state.config
        stats = await asyncio.get_running_loop().run_in_executor(None, self.state.engine.get_stats)
        return web.json_response({
            "version": __version__,
            "server_args": _jsonable(dataclasses.asdict(self.state.engine.server_args)),
            "http": {"host": cfg.host, "port": self.state.port, "api_key_set": bool(cfg.keys),
                     "api_keys": len(cfg.keys), "max_body_bytes": cfg.max_body_bytes,
                     "served_model_name": self.state.model_name},
            "stats": _jsonable(stats),
            "inflight_requests": len(self.state.inflight),
            "uptime_s": round(time.time() - self.state.started_at, 3),
        })

    async def flush_cache(self, request: web.Request) -> web.Response:
        ok = await asyncio.get_running_loop().run_in_executor(None, self.state.engine.flush_cache)
        if ok is False:
            raise APIError(400, "cache not flushed: requests are still running", code="requests_running")
        return web.json_response({"success": True, "message": "cache flushed"})

    async def abort_request(self, request: web.Request) -> web.Response:
        r = FieldReader(await self.state.read_json(request))
        rid = r.get("rid", "str", required=True)
        r.reject_unknown()
        found = self.state.engine.abort(rid)
        return web.json_response({"success": found is not False, "rid": rid})

    async def metrics(self, request: web.Request) -> web.Response:
        stats = await asyncio.get_running_loop().run_in_executor(None, self.state.engine.get_stats)
        text = self.state.metrics.render(stats or {})
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})


def add_logprob_text(meta: dict[str, Any], tokenizer: Any) -> None:
    """Give every ``[logprob, token_id]`` logprob entry its token text (``return_text_in_logprobs``)."""
    def with_text(entry: Any) -> Any:
        if isinstance(entry, (list, tuple)) and len(entry) >= 2 and isinstance(entry[1], int):
            return [entry[0], entry[1], tokenizer.decode([entry[1]], skip_special_tokens=False)]
        return entry

    for key in _LOGPROB_KEYS:
        if isinstance(meta.get(key), list):
            meta[key] = [with_text(e) for e in meta[key]]
    for key in _TOP_LOGPROB_KEYS:
        if isinstance(meta.get(key), list):
            meta[key] = [[with_text(e) for e in pos] if isinstance(pos, list) else pos for pos in meta[key]]


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)
