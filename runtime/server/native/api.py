"""SGLang's native API: ``/generate`` (its request and cumulative streams), the engine's admin routes, ``/``
and ``/version``.

SGLang's default ``/generate`` streaming: each chunk carries everything so far, not the delta.

The engine streams deltas (``text`` and ``output_ids`` new since the last chunk, logprob lists
for the new tokens only). SGLang's server sends, unless ``--incremental-streaming-output``, the
whole text so far, all output ids so far and the logprob lists so far in every chunk, and its
client (``sgl.RuntimeEndpoint``) slices the new text off itself. :class:`CumulativeStream` turns
one request's deltas into those chunks.

Parsing a ``POST /generate`` body (SGLang's ``GenerateReqInput``) into a :class:`GenerateRequest`.

A batch is ``text`` (or ``input_ids``) as a list; then every per-request field may be one value
shared by all items or a list with one entry per item: ``sampling_params``, ``rid``,
``return_logprob``, ``logprob_start_len`` and ``top_logprobs_num``. Inside ``sampling_params``,
``null`` means absent (SGLang's client sends ``stop_regex: null``), ``sampling_seed`` is SGLang's
name for ``seed``, and keys ``SamplingParams`` does not have follow the request's
:class:`~radixlm.runtime.server.transport.body.UnknownFields` policy, like unknown top-level fields.

``GET /`` and ``GET /version``: what this server is, for health probes and clients that detect servers.

``/version`` answers ``{"version": ...}`` (vLLM's route and shape); ``/`` names the server, its
version, the served model and where each API lives.

The SGLang-native routes: ``/generate``, health, model and server info, load, cache, abort,
metrics, and (:mod:`.tokenize`) ``/tokenize`` / ``/detokenize``.

``POST /generate`` (parsed by this module's request parser) answers exactly what ``Engine.generate``
returns (a dict, or a list for a batch). Streamed, each SSE event is one dict, with ``index`` for
batches, ending with ``data: [DONE]``; as in SGLang, its ``text``, ``output_ids`` and logprob lists
hold everything so far (:class:`CumulativeStream`), or only the new part with
``ServerArgs.incremental_streaming_output``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.server.chat.pipeline import check_fan_out
from radixlm.runtime.server.chat.tools import error_pointer
from radixlm.runtime.server.native.tokenize import TokenizeRoutes
from radixlm.runtime.server.transport.access import forbidden_unless_admin, is_admin
from radixlm.runtime.server.transport.body import (
    APIError,
    FieldReader,
    UnknownFields,
    bad_request,
    check_token_ids,
    client_message,
    read_cache_salt,
    with_route_names,
)
from radixlm.runtime.server.transport.sse import gather_all, merge_streams, write_stream
from radixlm.runtime.server.transport.state import CURRENT_TENANT, RequestRecord, ServedTokenizer, ServerState

from radixlm import __version__

# meta_info lists that grow with every chunk; prompt logprobs come once and are repeated after
_GROWING = ("output_token_logprobs", "output_top_logprobs")
_ONCE = ("input_token_logprobs", "input_top_logprobs")


class CumulativeStream:
    """The running totals of one streamed request."""

    def __init__(self) -> None:
        self.text = ""
        self.output_ids: list[int] = []
        self.lists: dict[str, list] = {}
        self.once: dict[str, Any] = {}

    def add(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """The cumulative chunk for the engine's delta ``chunk``."""
        self.text += chunk.get("text") or ""
        self.output_ids.extend(chunk.get("output_ids") or [])
        meta = dict(chunk.get("meta_info") or {})
        for key in _GROWING:
            if key in meta:
                self.lists.setdefault(key, []).extend(meta[key] or [])
                meta[key] = list(self.lists[key])
        for key in _ONCE:
            if key in meta:
                self.once[key] = meta[key]
            elif key in self.once:
                meta[key] = self.once[key]
        return {**chunk, "text": self.text, "output_ids": list(self.output_ids), "meta_info": meta}


_SAMPLING_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))
_SAMPLING_ALIASES = {"sampling_seed": "seed"}  # SGLang's name -> ours


@dataclass(frozen=True)
class GenerateRequest:
    """A parsed ``/generate`` body; every list holds one entry per prompt (batch item)."""

    prompts: list[str | list[int]]
    is_batch: bool
    is_ids: bool
    sampling: list[SamplingParams]  # built here, once; the engine takes them whole
    rids: list[str | None]
    stream: bool = False
    return_logprob: list[bool] = field(default_factory=list)
    logprob_start_len: list[int | None] = field(default_factory=list)
    top_logprobs_num: list[int] = field(default_factory=list)
    return_text_in_logprobs: bool = False
    salt: str | None = None  # cache_salt / extra_key: the request's radix-cache namespace
    ignored: UnknownFields = field(default_factory=UnknownFields)


def parse_generate_request(body: dict[str, Any], strict: bool = False) -> GenerateRequest:
    """Validate a ``/generate`` body (400 naming the bad field; unknown fields too if ``strict``)."""
    r = FieldReader(body, unknown=UnknownFields(strict))
    prompts, is_batch, is_ids = _prompts(r)
    n = len(prompts)
    raw = per_item(r.get("sampling_params", ("object", "list"), {}), n, "sampling_params")
    sampling = [_sampling(sp, f"sampling_params[{i}]" if is_batch else "sampling_params", r.unknown)
                for i, sp in enumerate(raw)]
    rid = r.get("rid", ("str", "list"))
    rids = per_item(rid, n, "rid") if isinstance(rid, list) else [rid] * n
    if rid is not None and not isinstance(rid, list) and is_batch:
        rids = [f"{rid}-{i}" for i in range(n)]
    starts = _item_values(r, "logprob_start_len", "int", n, None, lo=-1)
    req = GenerateRequest(
        prompts, is_batch, is_ids, sampling, rids,
        stream=r.get("stream", "bool", False),
        return_logprob=_item_values(r, "return_logprob", "bool", n, False),
        logprob_start_len=[None if s == -1 else s for s in starts],
        top_logprobs_num=_item_values(r, "top_logprobs_num", "int", n, 0, lo=0, hi=100),
        return_text_in_logprobs=r.get("return_text_in_logprobs", "bool", False),
        salt=read_cache_salt(r), ignored=r.unknown,
    )
    r.reject_unknown()
    return req


def _prompts(r: FieldReader) -> tuple[list[str | list[int]], bool, bool]:
    """(prompts, is_batch, is_ids) from exactly one of ``text`` and ``input_ids``."""
    text = r.get("text", ("str", "list"))
    ids = r.get("input_ids", "list")
    if (text is None) == (ids is None):
        raise bad_request("exactly one of 'text' and 'input_ids' is required", param="text")
    if text is None:
        is_batch = bool(ids) and isinstance(ids[0], list)
        prompts = [check_token_ids(p, f"input_ids[{i}]") for i, p in enumerate(ids)] if is_batch \
            else [check_token_ids(ids, "input_ids")]
        return prompts, is_batch, True
    is_batch = isinstance(text, list)
    prompts = text if is_batch else [text]
    if not prompts:
        raise bad_request("'text' must not be an empty list", param="text", code="invalid_value")
    for i, p in enumerate(prompts):
        if not isinstance(p, str) or not p:
            raise bad_request("'text' must be a non-empty string or a list of them",
                              param=f"text[{i}]" if is_batch else "text", code="invalid_type")
    return prompts, is_batch, False


def per_item(value: Any, n: int, param: str) -> list[Any]:
    """A per-request value: one shared value, or a list with one entry per batch item."""
    if not isinstance(value, list):
        return [value] * n
    if len(value) != n:
        raise bad_request(f"'{param}' has {len(value)} entries but the batch has {n} prompts", param=param)
    return value


def _item_values(r: FieldReader, key: str, kind: str, n: int, default: Any,
                 lo: float | None = None, hi: float | None = None) -> list[Any]:
    """``key`` as one value per item: a shared value or a list of them, each checked like ``r.get``."""
    value = r.get(key, (kind, "list"), default, lo=lo, hi=hi)
    if not isinstance(value, list):
        return [value] * n
    return [FieldReader({f"{key}[{i}]": v}).get(f"{key}[{i}]", kind, default, lo=lo, hi=hi)
            for i, v in enumerate(per_item(value, n, key))]


def _sampling(sp: Any, where: str, unknown: UnknownFields) -> SamplingParams:
    """One item's ``sampling_params``: nulls dropped, SGLang's names mapped, unknown keys handled,
    then built into ``SamplingParams`` (400 naming the field)."""
    if sp is None:
        return SamplingParams()
    if not isinstance(sp, dict):
        raise bad_request(f"'{where}' must be an object", param=where, code="invalid_type")
    out: dict[str, Any] = {}
    for key, value in sp.items():
        if value is None:
            continue
        name = _SAMPLING_ALIASES.get(key, key)
        if name in out:
            raise bad_request(f"'{where}.{key}' repeats '{name}'", param=f"{where}.{key}", code="invalid_value")
        out[name] = value
    unknown.found([f"{where}.{k}" for k in sorted(set(out) - _SAMPLING_FIELDS)])
    out = {k: v for k, v in out.items() if k in _SAMPLING_FIELDS}
    try:
        return SamplingParams.from_dict(out)
    except (TypeError, ValueError) as e:  # a TypeError's text is Python's, not a reason for the client
        why = client_message(str(e)) if isinstance(e, ValueError) else "a field has the wrong type"
        name = getattr(e, "field", None)
        raise bad_request(f"sampling_params: {why}", param=f"{where}.{name}" if name else where,
                          code="invalid_value") from None


API_ROOTS = {"openai": "/v1", "anthropic": "/v1/messages", "ollama": "/api", "sglang": "/generate",
             "metrics": "/metrics", "health": "/health"}


class ServerInfoRoutes:
    """``/`` and ``/version``; ``register`` adds them to an application."""

    def __init__(self, state: ServerState):
        self.state = state

    def register(self, app: web.Application) -> None:
        app.router.add_get("/", self.root)
        app.router.add_get("/version", self.version)

    async def root(self, request: web.Request) -> web.Response:
        status = "shutting_down" if self.state.draining else "ok"
        return web.json_response({"name": "radixlm", "version": __version__, "status": status,
                                  "model": self.state.model_name, "apis": API_ROOTS})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": __version__})


_LOGPROB_KEYS = ("input_token_logprobs", "output_token_logprobs")
_TOP_LOGPROB_KEYS = ("input_top_logprobs", "output_top_logprobs")
# what a non-admin tenant sees of the engine's stats: its size, not the other tenants' traffic
CAPACITY_STATS = frozenset({"kv_total_slots"})


class NativeRoutes:
    """Handlers of the native API; ``register`` adds them to an application."""

    def __init__(self, state: ServerState):
        self.state = state
        self.strict = state.strict  # unknown fields: 400
        self.incremental = bool(state.engine.server_args.incremental_streaming_output)

    def register(self, app: web.Application) -> None:
        app.router.add_post("/generate", with_route_names(self.generate))  # constraint errors name their field
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health_generate)
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_get("/server_info", self.server_info)  # SGLang's newer name; its client calls it
        app.router.add_get("/get_load", self.get_load)
        app.router.add_post("/flush_cache", self.flush_cache)  # POST only: an <img> tag cannot flush
        app.router.add_post("/abort_request", self.abort_request)
        app.router.add_get("/metrics", self.metrics)
        TokenizeRoutes(self.state, self.strict).register(app)

    # ------------------------------------------------------------------ /generate

    async def generate(self, request: web.Request) -> web.StreamResponse:
        async with self.state.track("/generate") as record:
            req = parse_generate_request(await self.state.read_json(request), self.strict)
            record.client_rids = [r for r in req.rids if r is not None]
            check_fan_out(self.state.engine.server_args, [sp.n for sp in req.sampling],
                          "input_ids" if req.is_ids else "text", "sampling_params.n")
            headers = req.ignored.report("/generate")
            extra_key = self.state.extra_key(request, req.salt)
            req = await self._encoded(req)
            try:
                if req.stream:
                    return await write_stream(request, self._events(req, record, extra_key), headers)
                results = await gather_all([self._one(req, i, record, extra_key)
                                            for i in range(len(req.prompts))])
            except ValueError as e:
                if error_pointer(e) is None:
                    raise
                raise APIError(400, f"sampling_params.json_schema: {client_message(str(e))}",
                               param="sampling_params.json_schema", code="unsupported_schema") from None
            return web.json_response(results if req.is_batch else results[0], headers=headers)

    async def _encoded(self, req: GenerateRequest) -> GenerateRequest:
        """``req`` with its text prompts tokenized off the event loop (every size check first)."""
        if req.is_ids:
            return req
        params = [f"text[{i}]" if req.is_batch else "text" for i in range(len(req.prompts))]
        for prompt, param in zip(req.prompts, params):
            self.state.prompts.check_chars(prompt, param)
        ids = await gather_all([self.state.prompts.encode(p, param) for p, param in zip(req.prompts, params)])
        return dataclasses.replace(req, prompts=ids, is_ids=True)

    def _kwargs(self, req: GenerateRequest, i: int, record: RequestRecord,
                extra_key: str | None) -> dict[str, Any]:
        prompt = req.prompts[i]
        return {
            "prompt": None if req.is_ids else prompt, "input_ids": prompt if req.is_ids else None,
            "sampling_params": req.sampling[i], "return_logprob": req.return_logprob[i],
            "logprob_start_len": req.logprob_start_len[i], "top_logprobs_num": req.top_logprobs_num[i],
            "rid": req.rids[i] or self.state.new_rid(record, f"-{i}"), "extra_key": extra_key,
        }

    async def _one(self, req: GenerateRequest, i: int, record: RequestRecord, extra_key: str | None) -> Any:
        kwargs = self._kwargs(req, i, record, extra_key)
        result = await self.state.generate(kwargs.pop("rid"), **kwargs)
        for item in result if isinstance(result, list) else [result]:
            record.add(item.get("meta_info", {}))
            with_stream_meta(item.get("meta_info", {}), 0, req.return_logprob[i])
            if req.return_text_in_logprobs:
                add_logprob_text(item.get("meta_info", {}), self.state.tokenizer)
        return result

    async def _events(self, req: GenerateRequest, record: RequestRecord,
                      extra_key: str | None) -> AsyncIterator[dict]:
        streams = []
        for i in range(len(req.prompts)):
            kwargs = self._kwargs(req, i, record, extra_key)
            streams.append(self.state.stream(kwargs.pop("rid"), **kwargs))
        totals = None if self.incremental else [CumulativeStream() for _ in streams]
        lp_counts = [0] * len(streams)  # output logprobs sent so far, per prompt
        async with aclosing(merge_streams(streams)) as merged:
            async for i, chunk in merged:
                meta = chunk.get("meta_info", {})
                lp_counts[i] = with_stream_meta(meta, lp_counts[i], req.return_logprob[i])
                if meta.get("finish_reason") is not None:
                    record.add(meta)
                if req.return_text_in_logprobs:
                    add_logprob_text(meta, self.state.tokenizer)
                if totals is not None:
                    chunk = totals[i].add(chunk)
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
                rid, input_ids=ids, sampling_params=SamplingParams(max_new_tokens=1, temperature=0.0)), 60)
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
            "architecture": cfg.architecture,
            "vocab_size": cfg.vocab_size,
        })

    async def server_info(self, request: web.Request) -> web.Response:
        """SGLang's layout: the server arguments at the top level, ``version``, ``internal_states``
        (one dict per data-parallel rank), plus radixlm's ``server_args`` / ``stats`` / ``http``."""
        cfg = self.state.config
        stats = _jsonable(await self._stats())
        own = self._own_rids(request)
        if not is_admin(request):  # another tenant's traffic is not this caller's to see
            stats = {k: v for k, v in stats.items() if k in CAPACITY_STATS}
        args = _jsonable(dataclasses.asdict(self.state.engine.server_args))
        http = {"host": cfg.host, "port": self.state.port, "api_key_set": bool(cfg.keys),
                "api_keys": len(cfg.keys), "max_body_bytes": cfg.max_body_bytes,
                "served_model_name": self.state.model_name}
        return web.json_response({
            **args, "host": cfg.host, "port": self.state.port, "served_model_name": self.state.model_name,
            "max_total_num_tokens": stats.get("kv_total_slots"),
            "max_req_input_len": args.get("max_req_input_len") or self.state.context_len,
            "version": __version__, "internal_states": [stats], "startup_time": self.state.started_at,
            "server_args": args, "http": http, "stats": stats,
            "inflight_requests": len(own),
            "uptime_s": round(time.time() - self.state.started_at, 3),
        })

    async def get_load(self, request: web.Request) -> web.Response:
        """SGLang's ``/get_load``: one entry per data-parallel rank (one here)."""
        stats = await self._stats()
        running, waiting = int(stats.get("num_running_reqs", 0)), int(stats.get("num_queued_reqs", 0))
        return web.json_response([{"dp_rank": 0, "num_reqs": running + waiting, "num_waiting_reqs": waiting,
                                   "num_tokens": int(stats.get("kv_used_slots", 0))}])

    async def _stats(self) -> dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(None, self.state.engine.get_stats) or {}

    def _own_rids(self, request: web.Request) -> list[str]:
        """The running engine requests the caller may see and abort: all of them for an admin."""
        if is_admin(request):
            return sorted(self.state.inflight)
        tenant = CURRENT_TENANT.get()
        return sorted(rid for rid in self.state.inflight if self.state.owners.get(rid) == tenant)

    async def flush_cache(self, request: web.Request) -> web.Response:
        forbidden_unless_admin(request, "/flush_cache")
        ok = await asyncio.get_running_loop().run_in_executor(None, self.state.engine.flush_cache)
        if ok is False:
            raise APIError(400, "cache not flushed: requests are still running", code="requests_running")
        return web.json_response({"success": True, "message": "cache flushed"})

    async def abort_request(self, request: web.Request) -> web.Response:
        """Abort ``rid``'s engine requests (an OpenAI request's ``rid`` covers all its choices), or
        every request with ``abort_all`` (an admin's only); ``success`` is false when none was
        running. Another tenant's rid is answered as an unknown one."""
        r = FieldReader(await self.state.read_json(request), unknown=UnknownFields(self.strict))
        abort_all = r.get("abort_all", "bool", False)
        rid = r.get("rid", "str", required=not abort_all)
        if not abort_all and not rid:
            raise APIError(400, "rid must be a non-empty string (or pass abort_all: true)", param="rid")
        r.reject_unknown()
        if abort_all:
            forbidden_unless_admin(request, "abort_all", param="abort_all")
        running = self._own_rids(request)
        found = running if abort_all else [x for x in running if x == rid or x.startswith(f"{rid}-")]
        for one in found:
            self.state.engine.abort(one)
        body: dict[str, Any] = {"success": bool(found), "rid": rid, "aborted": len(found)}
        if not found:
            body["message"] = f"no running request with rid {rid!r}" if rid else "no running request"
        return web.json_response(body, headers=r.unknown.report("/abort_request"))

    async def metrics(self, request: web.Request) -> web.Response:
        forbidden_unless_admin(request, "/metrics")
        stats = await asyncio.get_running_loop().run_in_executor(None, self.state.engine.get_stats)
        text = self.state.metrics.render(stats or {})
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})


def with_stream_meta(meta: dict[str, Any], logprobs_before: int, return_logprob: bool) -> int:
    """SGLang's ``meta_info`` fields on a ``/generate`` result or chunk: ``weight_version`` and, with
    ``return_logprob``, ``output_token_logprobs_length`` (the output logprobs so far, whether the
    chunk carries them all or only the new ones). Returns that count."""
    meta.setdefault("weight_version", "default")
    if not return_logprob:
        return logprobs_before
    count = logprobs_before + len(meta.get("output_token_logprobs") or [])
    meta["output_token_logprobs_length"] = count
    return count


def add_logprob_text(meta: dict[str, Any], tokenizer: ServedTokenizer) -> None:
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
