"""What every route stands on: the engine as the server sees it, the tokenizer pools, and the shared server
state.

What the HTTP server needs from an engine: :class:`ServedEngine`, exactly the members it uses.

The server never imports the engine (the package map keeps ``runtime.server`` off
``runtime.engine``); it is handed an object. ``Engine`` satisfies these protocols, and so does any
test double that forwards to one. Every member listed here is used without a fallback.

Prompt text to token ids off the event loop, after a cheap size check on the raw text.

Tokenizing (and chat-template rendering) costs time linear in the text, so a multi-megabyte prompt
run in a handler would stall every route. :class:`PromptEncoder` first compares the text's length
with ``max_chars``, the most characters a prompt that fits the context can have: every token
covers at most ``longest`` bytes of text (the vocabulary's longest token, at least one character
each), so a prompt of more than ``context_len * longest`` characters needs more than
``context_len`` tokens; ``NORMALIZER_SLACK`` covers normalizers that compose characters (Unicode
NFC / NFKC shrink UTF-8 text at most 3x; a normalizer that deletes text is not covered). Such a prompt is a 400 naming the field, before any tokenizing. The rest runs in a
small dedicated thread pool (``run``), and encoding goes through the tokenizer's GIL-releasing
batch path where it has one, so the event loop keeps serving meanwhile.

Utility routes (``/tokenize``, ``/detokenize``, token counting) run in a pool of their own
(``run_utility``, one thread), so a burst of them waits behind itself and never delays the
tokenizing of a generation request; they apply the same character bound first.

What every route shares: the engine, the server config, metrics, and the request bookkeeping.

:meth:`ServerState.generate` and :meth:`ServerState.stream` are the only places the HTTP layer
calls the engine. Both go through ``Engine.async_generate`` (the engine's step loop runs in its own
thread, so the event loop never blocks), give each engine request an id so that a cancelled
handler (client gone) aborts it and its KV slots are freed, and feed the per-request record that
becomes one INFO log line and the metrics.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from aiohttp import web
from radixlm.runtime.chat_formats.reasoning.registry import resolve as resolve_reasoning
from radixlm.runtime.chat_formats.tool_formats.registry import resolve
from radixlm.runtime.sampling_params import SamplingDefaults, SamplingParams
from radixlm.runtime.server.metrics import ServerMetrics
from radixlm.runtime.server.transport.body import (
    APIError,
    bad_request,
    decompress_body,
    from_exception,
    parse_json_body,
    reject_lone_surrogates,
)
from radixlm.runtime.server.transport.connection_guard import ConnectionGuard
from radixlm.runtime.server_args import ServerArgs

# tenancy: who a request is for (set by the access middleware, read by every route)
TENANT_KEY = web.RequestKey("radixlm_tenant", str)  # set on a request when several keys are configured
ADMIN_KEY = web.RequestKey("radixlm_admin", bool)  # set on every authenticated request
# the tenant of the request the running task serves: the engine requests it starts are its own
CURRENT_TENANT: ContextVar[str | None] = ContextVar("radixlm_tenant", default=None)

def check_api_key(key: Any, source: str) -> str:
    """A key must be a non-empty string without whitespace or commas (the variable's separator)."""
    if not isinstance(key, str) or not key or any(c.isspace() or c == "," for c in key):
        raise ValueError(f"{source}: an API key must be a non-empty string without whitespace or commas")
    return key


def cache_namespace(tenant: str | None, salt: str | None, isolation: str = "shared") -> str | None:
    """The engine's ``extra_key``: the tenant's namespace, split further by the request's salt.

    ``salt`` is :func:`~.body.read_cache_salt`'s tagged form, so ``cache_salt: "x"`` and
    ``extra_key: "x"`` name different namespaces. Under ``isolation="per-request"`` a request
    without a salt gets a namespace of its own (shared by its choices and phases only). Every
    namespace of a tenant starts with its id and a ``/``, and ids have a fixed length, so no salt of
    one tenant can name a namespace of another."""
    if salt is None and isolation == "per-request":
        salt = json.dumps({"request": uuid.uuid4().hex})
    if tenant is None:
        return salt
    return tenant if salt is None else f"{tenant}/{salt}"


class IncrementalDetokenizer(Protocol):
    """Turns token ids into text as they come (a character split across tokens waits for its end)."""

    def step(self, ids: list[int]) -> str: ...


@runtime_checkable
class ServedTokenizer(Protocol):
    """The tokenizer calls of the routes: encode, decode, the chat template, token bytes."""

    vocab_size: int

    @property
    def chat_template(self) -> str | None: ...

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...

    def apply_chat_template(self, messages: list[dict], tools: list[dict] | None = None,
                            add_generation_prompt: bool = True, **kwargs: Any) -> str: ...

    def special_ids_of(self, texts: Iterable[str]) -> list[int]: ...

    def incremental_detokenizer(self) -> IncrementalDetokenizer: ...

    def id_to_bytes(self, token_id: int) -> bytes: ...


@runtime_checkable
class ServedModelConfig(Protocol):
    """The model facts ``/get_model_info`` and the context checks read."""

    architecture: str
    vocab_size: int
    context_len: int


@runtime_checkable
class ServedEngine(Protocol):
    """The engine behind the HTTP server (``radixlm.Engine``'s public API, the parts the routes call)."""

    server_args: ServerArgs
    model_path: str
    model_name: str  # ORG/NAME for a hub snapshot, else the checkpoint's folder or file name
    tokenizer: ServedTokenizer
    model_config: ServedModelConfig
    sampling_defaults: SamplingDefaults  # what a request's unset sampler fields become

    async def async_generate(self, prompt: str | list[str] | None = None,
                             sampling_params: SamplingParams | dict[str, Any] | None = None,
                             input_ids: list[int] | None = None, return_logprob: bool = False,
                             logprob_start_len: int | None = None, top_logprobs_num: int = 0,
                             stream: bool = False, rid: str | None = None,
                             extra_key: str | None = None) -> Any:
        """The result dict (``stream=False``) or an async iterator of chunk dicts (``stream=True``)."""
        ...

    async def async_embed(self, input_ids: list[list[int]]) -> list[list[float]]:
        """One pooled, L2-normalised embedding per token list (``ValueError`` for bad input)."""
        ...

    def abort(self, rid: str) -> None: ...

    def flush_cache(self) -> bool: ...

    def get_stats(self) -> dict[str, Any]: ...


T = TypeVar("T")
NORMALIZER_SLACK = 4
TOKENIZE_THREADS = 2
UTILITY_THREADS = 1


def longest_token_bytes(tokenizer: Any) -> int | None:
    """The byte length of the vocabulary's longest token (None when the tokenizer cannot tell)."""
    all_bytes = getattr(tokenizer, "all_token_bytes", None)
    if all_bytes is None:
        return None
    return max((len(b) for b in all_bytes()), default=0) or None


class PromptEncoder:
    """The size check and the tokenizer thread pool of one server."""

    def __init__(self, tokenizer: Any, context_len: int):
        self.tokenizer = tokenizer
        longest = longest_token_bytes(tokenizer) if context_len else None
        self.max_chars = context_len * longest * NORMALIZER_SLACK if longest else None
        self.pool = ThreadPoolExecutor(TOKENIZE_THREADS, thread_name_prefix="radixlm-tokenize")
        self.utility_pool = ThreadPoolExecutor(UTILITY_THREADS, thread_name_prefix="radixlm-tokenize-utility")

    def check_chars(self, text: str | int, param: str) -> None:
        """400 naming ``param`` when ``text`` (or a count of characters) is more than any prompt that fits."""
        chars = text if isinstance(text, int) else len(text)
        if self.max_chars is not None and chars > self.max_chars:
            raise bad_request(f"'{param}': {chars} characters cannot fit the model's context (at most "
                              f"{self.max_chars} characters for this tokenizer and context length)",
                              param=param, code="context_length_exceeded")

    def encode_sync(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``, through the GIL-releasing batch path when the tokenizer has one."""
        batch = getattr(self.tokenizer, "encode_batch", None)
        if batch is not None:
            return batch([text], add_special_tokens=add_special_tokens)[0]
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    async def encode(self, text: str, param: str, add_special_tokens: bool = True) -> list[int]:
        """Check ``text``'s size, then encode it in the pool (400 naming ``param`` if it has no tokens)."""
        self.check_chars(text, param)
        ids = await self.run(self.encode_sync, text, add_special_tokens)
        if not ids:
            raise bad_request(f"{param} must be non-empty (it encodes to no tokens)", param=param,
                              code="invalid_value")
        return ids

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the tokenizer pool (template rendering, tokenizing)."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def run_utility(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the utility routes' own pool (never ahead of a generation request's work)."""
        return await asyncio.get_running_loop().run_in_executor(self.utility_pool, fn, *args)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.utility_pool.shutdown(wait=False, cancel_futures=True)


def text_chars(value: Any) -> int:
    """How many characters the strings inside ``value`` (nested dicts and lists, keys excluded) hold
    together. A chat template renders the messages' text whole, so messages whose strings exceed the
    character bound make a prompt that exceeds it too (``max_chars``' 4x slack covers dropped ids)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


logger = logging.getLogger("radixlm.server.requests")  # one INFO line per request

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
JSON_THREADS = 2  # bodies decoded at once; more wait in the pool's queue
INLINE_BODY_BYTES = 64 * 1024  # smaller bodies decode in the handler (well under a millisecond)


@dataclass
class ServerConfig:
    """HTTP-level settings (the engine's live in ``ServerArgs``).

    ``api_key`` and ``api_keys`` together are the accepted keys (none: no auth); with more than one,
    each key's requests get their own radix-cache namespace (see :mod:`.transport.access`)."""

    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    api_keys: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    served_model_name: str | None = None
    served_model_aliases: tuple[str, ...] = ()  # more names requests may use (responses carry the first)
    graceful_shutdown_s: float = 30.0
    admin_api_key: str | None = None  # admin routes act on every tenant with it (see auth)

    def __post_init__(self) -> None:
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port must be an integer in [0, 65535], got {self.port!r}")
        if not isinstance(self.max_body_bytes, int) or self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be an integer >= 1024, got {self.max_body_bytes!r}")
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must be a non-empty string when given")
        if isinstance(self.api_keys, str):
            raise ValueError("api_keys must be a sequence of keys, not one string")
        for key in self.api_keys:
            check_api_key(key, "api_keys")
        self.api_keys = tuple(self.api_keys)
        if self.admin_api_key is not None:
            check_api_key(self.admin_api_key, "admin_api_key")
            if self.admin_api_key in self.keys:
                raise ValueError("admin_api_key must differ from every API key")
        if not isinstance(self.graceful_shutdown_s, (int, float)) or self.graceful_shutdown_s < 0:
            raise ValueError(f"graceful_shutdown_s must be >= 0, got {self.graceful_shutdown_s!r}")

    @property
    def keys(self) -> list[str]:
        """Every accepted API key, without repeats (empty: authentication is off)."""
        return list(dict.fromkeys(([self.api_key] if self.api_key is not None else []) + list(self.api_keys)))


CURRENT_RECORD: ContextVar[RequestRecord | None] = ContextVar("radixlm_request_record", default=None)


class RequestRecord:
    """One HTTP request's totals across all the engine requests it made."""

    def __init__(self, route: str, request_id: str):
        self.route = route
        self.id = request_id
        self.client_rids: list[str] = []  # the ``rid``s the client gave (``/generate``), for the log line
        self.start = time.perf_counter()
        self.prompt = self.cached = self.completion = 0
        self.outcome = "success"
        self.status = 200

    def add(self, meta: dict[str, Any], prompt: bool = True) -> None:
        """Count a finished engine request's tokens (``prompt=False`` for a continuation phase).

        A request ended by ``/abort_request`` still answers 200, but it did not succeed: its
        outcome becomes ``abort``."""
        finish = meta.get("finish_reason")
        if (finish.get("type") if isinstance(finish, dict) else finish) == "abort":
            self.outcome = "abort"
        if prompt:
            self.prompt += int(meta.get("prompt_tokens", 0))
            self.cached += int(meta.get("cached_tokens", 0))
        self.completion += int(meta.get("completion_tokens", 0))


class ServerState:
    """The engine plus the HTTP layer's own state; one per application."""

    def __init__(self, engine: ServedEngine, config: ServerConfig):
        self.engine = engine
        self.config = config
        self.tokenizer = engine.tokenizer
        args = engine.server_args
        self.model_path = str(engine.model_path)
        self.model_name = config.served_model_name or engine.model_name
        self.metrics = ServerMetrics(self.model_name, args.metrics_prefix)
        # no --model-path: the embedded tiny checkpoint, whose random weights answer in noise
        self.random_weights = args.model_path is None
        self.port = config.port  # the bound port once listening (config.port may be 0)
        self.context_len = int(args.context_length or engine.model_config.context_len or 0)
        self.max_json_depth = int(args.max_json_depth)
        self.max_json_values = int(args.max_json_values)
        self.json_pool = ThreadPoolExecutor(JSON_THREADS, thread_name_prefix="radixlm-json")
        self.max_new_tokens_default = int(args.max_new_tokens_default)
        self.strict = bool(args.strict_api)  # unknown request fields: 400 instead of ignored
        # the tool-call format: --tool-call-parser, else detected from the chat template
        self.tool_format = resolve(args.tool_call_parser, self.tokenizer.chat_template)
        # the reasoning format: --reasoning-parser, else detected from the chat template (or None)
        self.reasoning_format = resolve_reasoning(args.reasoning_parser, self.tokenizer.chat_template)
        self.started_at = time.time()
        self.inflight: set[str] = set()
        self.owners: dict[str, str | None] = {}  # engine rid -> the tenant that started it
        self.cache_isolation = args.cache_isolation
        self.draining = False
        self.cut = False  # the shutdown grace is over: engine requests still running end with a 503
        self.handlers = 0  # HTTP handlers running (the shutdown waits for them)
        self.guard: ConnectionGuard | None = None  # the connection limits, once serving
        self.body_timeout_s = float(args.http_body_timeout_s)
        self.prompts = PromptEncoder(self.tokenizer, self.context_len)  # size check, tokenizer pool

    def check_model(self, model: str | None) -> None:
        """404 unless ``model`` is absent, the served name (or an alias), the model path or ``"default"``."""
        if model is not None and model not in (self.model_name, self.model_path, "default",
                                               *self.config.served_model_aliases):
            raise APIError(404, f"the model '{model}' does not exist; this server serves "
                           f"'{self.model_name}'", param="model", code="model_not_found")

    async def read_json(self, request: web.Request) -> dict[str, Any]:
        """The request's body as a JSON object, within the size, depth and value limits (400 / 413 otherwise)."""
        try:
            raw = await asyncio.wait_for(request.read(), self.body_timeout_s)
        except asyncio.TimeoutError:
            raise APIError(408, f"the request body did not arrive within {self.body_timeout_s:g} s "
                           "(http_body_timeout_s)", code="body_timeout") from None
        encoding = request.headers.get("Content-Encoding")
        if len(raw) <= INLINE_BODY_BYTES and encoding is None:
            return self._decode(raw, encoding)
        return await asyncio.get_running_loop().run_in_executor(self.json_pool, self._decode, raw, encoding)

    def _decode(self, raw: bytes, encoding: str | None) -> dict[str, Any]:
        """Inflate, bound and decode a body (see :mod:`.transport.body`)."""
        raw = decompress_body(raw, encoding, self.config.max_body_bytes)
        body = parse_json_body(raw, self.max_json_depth, self.max_json_values)
        reject_lone_surrogates(raw, body)
        return body

    async def offload(self, fn: Any, *args: Any) -> Any:
        """Run blocking work (a schema check) in a worker thread, so the event loop keeps serving."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def extra_key(self, request: web.Request, salt: str | None) -> str | None:
        """The engine's ``extra_key`` for this request: its API key's tenant and its own salt."""
        return cache_namespace(request.get(TENANT_KEY), salt, self.cache_isolation)

    @asynccontextmanager
    async def track(self, route: str, request_id: str | None = None) -> AsyncIterator[RequestRecord]:
        """Bookkeeping around one HTTP request: the INFO log line and the metrics."""
        record = RequestRecord(route, request_id or uuid.uuid4().hex[:16])
        token = CURRENT_RECORD.set(record)  # what a request cut at shutdown produced is counted in it
        try:
            yield record
        except (asyncio.CancelledError, ConnectionResetError):
            record.outcome, record.status = "aborted", 499
            raise
        except BaseException as e:  # noqa: B036 - re-raised: this only records the outcome
            err = from_exception(e) if isinstance(e, Exception) else None
            record.outcome, record.status = "error", (err.status if err else 500)
            raise
        finally:
            CURRENT_RECORD.reset(token)
            latency = time.perf_counter() - record.start
            self.metrics.record_request(record.outcome, record.prompt, record.cached, record.completion,
                                        latency if record.outcome == "success" else None)
            rid = f" rid={','.join(record.client_rids)[:200]!r}" if record.client_rids else ""  # quoted: no log injection
            logger.info("%s %s%s status=%d prompt_tokens=%d cached_tokens=%d completion_tokens=%d "
                        "latency=%.1fms", record.route, record.id, rid, record.status, record.prompt,
                        record.cached, record.completion, latency * 1000)

    def cut_all(self) -> int:
        """End of the shutdown grace: abort every engine request still in flight (and refuse new ones);
        their handlers answer 503, streams with an error event and ``[DONE]``. Returns how many."""
        self.cut = True
        running = list(self.inflight)
        for rid in running:
            self.engine.abort(rid)
        return len(running)

    def _check_cut(self, meta: dict[str, Any] | None = None) -> None:
        """503 once the shutdown has cut the requests (for ``meta``: if it is an aborted one's end)."""
        if self.cut and (meta is None or _is_abort(meta)):
            if meta is not None:
                _count_cut(meta)
            raise APIError(503, "the server is shutting down; the request was cut at the end of the "
                           "graceful-shutdown period", code="shutting_down")

    def new_rid(self, record: RequestRecord, suffix: str = "") -> str:
        return f"{record.id}{suffix}-{uuid.uuid4().hex[:6]}"

    async def generate(self, rid: str, observe_ttft: bool = True, **kwargs: Any) -> Any:
        """One non-streamed engine request; cancelling the caller aborts it in the engine.

        Its time to first token comes from the engine's ``first_token_latency`` (``observe_ttft=False``
        for continuation phases, whose first token is not the request's)."""
        self._check_cut()
        self.inflight.add(rid)
        self.owners[rid] = CURRENT_TENANT.get()
        try:
            result = await self.engine.async_generate(rid=rid, stream=False, **kwargs)
            metas = [out.get("meta_info", {}) for out in (result if isinstance(result, list) else [result])]
            if self.cut and any(_is_abort(meta) for meta in metas):
                for meta in metas:  # every choice's tokens count, then the request answers 503
                    _count_cut(meta)
                self._check_cut()
            if observe_ttft:
                for out in result if isinstance(result, list) else [result]:
                    meta = out.get("meta_info", {})
                    if meta.get("first_token_latency") is not None:
                        self.metrics.ttft.observe(meta["first_token_latency"])
                    self.metrics.record_output(meta)
            return result
        except asyncio.CancelledError:
            self.engine.abort(rid)
            raise
        finally:
            self.inflight.discard(rid)
            self.owners.pop(rid, None)

    async def stream(self, rid: str, observe_ttft: bool = True, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        """One streamed engine request: incremental dicts. Leaving early aborts it in the engine.

        ``observe_ttft=False`` for continuation phases, whose first token is not the request's."""
        self._check_cut()
        self.inflight.add(rid)
        self.owners[rid] = CURRENT_TENANT.get()
        finished = False
        start = last = time.perf_counter()
        sent_tokens = 0
        try:
            chunks = await self.engine.async_generate(rid=rid, stream=True, **kwargs)
            async for chunk in chunks:
                now = time.perf_counter()
                new = _new_tokens(chunk, sent_tokens)
                if new:
                    if sent_tokens == 0:
                        if observe_ttft:
                            self.metrics.ttft.observe(now - start)
                    else:
                        for _ in range(new):
                            self.metrics.itl.observe((now - last) / new)
                    sent_tokens += new
                    last = now
                finished = chunk.get("meta_info", {}).get("finish_reason") is not None
                if finished:
                    self._check_cut(chunk["meta_info"])
                if finished and observe_ttft:
                    self.metrics.record_output(chunk["meta_info"])
                yield chunk
        finally:
            self.inflight.discard(rid)
            self.owners.pop(rid, None)
            if not finished:
                self.engine.abort(rid)


def _count_cut(meta: dict[str, Any]) -> None:
    """Count a cut request's tokens in the HTTP request's record (its route never sees its end);
    its prompt only when no earlier phase of the same HTTP request was counted."""
    record = CURRENT_RECORD.get()
    if record is not None:
        record.add(meta, prompt=record.prompt == 0)


def _is_abort(meta: dict[str, Any]) -> bool:
    finish = meta.get("finish_reason")
    return (finish.get("type") if isinstance(finish, dict) else finish) == "abort"


def _new_tokens(chunk: dict[str, Any], sent: int) -> int:
    """How many tokens this chunk adds, from its running completion count."""
    meta = chunk.get("meta_info", {})
    total = meta.get("completion_tokens")
    if isinstance(total, int):
        return max(total - sent, 0)
    return len(chunk.get("output_ids") or [])
