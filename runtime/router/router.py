"""The data-parallel router: one HTTP front for several radixlm servers, routing by cached prefix.

``radixlm router --worker URL --worker URL`` (or ``radixlm serve --dp-size N``) runs this app. Each
generation request is proxied, body and (SSE) stream untouched, to the replica that
:class:`~radixlm.runtime.router.policy.RoutingPolicy` picks from the request's text. A background
task probes every replica's ``/health``; a replica that fails a probe or a connection leaves the
rotation (its in-flight requests fail with a 502 error rather than hang) and rejoins once it answers
again. Routes about every replica (cache flush, abort, load, server info, metrics) ask them all
(:mod:`radixlm.runtime.router.fanout`); informational ones and ``/tokenize`` /
``/detokenize`` go to any healthy replica; ``/router/stats`` reports per-replica load and routing
counts.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from radixlm.runtime.router.fanout import FanOutRoutes
from radixlm.runtime.router.policy import (
    NoHealthyReplica,
    ReplicaState,
    RoutingConfig,
    RoutingPolicy,
)
from radixlm.runtime.server.http_errors import APIError

logger = logging.getLogger("radixlm.router")

REPLICA_CONNECTIONS = 64  # the replicas' default --max-connections-per-client

GENERATION_ROUTES = ("/generate", "/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages",
                     "/api/chat", "/api/generate")
# chat-like routes: their conversation, in the order the template renders it, routes them
CONVERSATION_KEYS = {"/v1/chat/completions": ("messages",), "/v1/messages": ("system", "messages"),
                     "/api/chat": ("messages",), "/v1/responses": ("instructions", "input")}
FORWARDED_GET_ROUTES = ("/get_model_info", "/v1/models", "/v1/models/{model:.+}", "/health_generate", "/",
                        "/version", "/api/tags", "/api/version", "/api/ps")
# the replicas share one tokenizer: any of them answers
FORWARDED_POST_ROUTES = ("/tokenize", "/detokenize", "/v1/tokenize", "/v1/detokenize", "/api/show",
                         "/v1/messages/count_tokens", "/v1/embeddings", "/api/embed", "/api/embeddings")
REPLICA_HEADER = "X-Radixlm-Replica"  # which replica answered, for clients and tests
HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


@dataclass(frozen=True)
class RouterConfig:
    """Replica URLs, routing knobs and the health-check cadence."""

    workers: list[str]
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    health_interval_s: float = 2.0
    health_timeout_s: float = 2.0
    request_timeout_s: float = 3600.0
    fanout_timeout_s: float = 30.0  # each replica's answer to a route asked of all of them
    max_body_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if not self.workers:
            raise ValueError("workers: at least one --worker URL is required")
        for url in self.workers:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"workers: {url!r} is not an http(s) URL")
        if min(self.health_interval_s, self.health_timeout_s, self.fanout_timeout_s) <= 0:
            raise ValueError("health_interval_s, health_timeout_s and fanout_timeout_s must be > 0")


def _conversation_text(body: dict[str, Any], keys: tuple[str, ...]) -> str:
    """A chat-like body's tools, then its system text and messages, as one string."""
    parts = [json.dumps(body.get("tools"), sort_keys=True) if body.get("tools") else ""]
    for key in keys:
        value = body.get(key)
        role = "user" if key == "input" else "system"  # a string input is the user's, a system text the system's
        items = [{"role": role, "content": value}] if isinstance(value, str) else value
        for m in items if isinstance(items, list) else []:
            if isinstance(m, dict):
                content = m.get("content")
                text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
                parts.append(f"<{m.get('role')}>{text}")
    return "".join(parts)


def routing_text(path: str, body: Any) -> str:
    """The text whose prefix decides the replica: the prompt, as the replica will see it."""
    if not isinstance(body, dict):
        return ""
    if path in CONVERSATION_KEYS:
        return _conversation_text(body, CONVERSATION_KEYS[path])
    prompt = body.get("text") if path == "/generate" else body.get("prompt")
    if prompt is None and path == "/generate":
        prompt = body.get("input_ids")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch goes to one replica; route by its first member
    if isinstance(prompt, list):
        return " ".join(str(t) for t in prompt)
    return prompt if isinstance(prompt, str) else ""


class _ConnectFailed(Exception):
    """The replica could not be reached at all (so the request may go elsewhere)."""


class Router:
    """Proxy state: the routing policy, one HTTP client session, the health-check task."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.policy = RoutingPolicy([u.rstrip("/") for u in config.workers], config.routing)
        self._session: aiohttp.ClientSession | None = None
        self._health_task: asyncio.Task | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "router not started"
        return self._session

    async def start(self, _app: web.Application | None = None) -> None:
        timeout = aiohttp.ClientTimeout(total=self.config.request_timeout_s, sock_connect=5)
        # A replica counts the router as one client: stay within its per-client connection cap (further
        # requests wait here for a pooled connection instead of being refused there).
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=REPLICA_CONNECTIONS)
        self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False, connector=connector)
        await self.check_health()
        self._health_task = asyncio.create_task(self._health_loop())

    async def stop(self, _app: web.Application | None = None) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
        if self._session is not None:
            await self._session.close()

    async def check_health(self) -> None:
        """Probe every replica once, updating the rotation."""
        await asyncio.gather(*(self._probe(r) for r in self.policy.replicas.values()))

    async def _probe(self, replica: ReplicaState) -> None:
        try:
            timeout = aiohttp.ClientTimeout(total=self.config.health_timeout_s)
            async with self.session.get(replica.url + "/health", timeout=timeout) as resp:
                ok = resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            ok = False
        if ok != replica.healthy:
            logger.warning("replica %s is %s", replica.url, "back in rotation" if ok else "out of rotation")
        self.policy.set_health(replica.url, ok)

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            await self.check_health()

    async def proxy_generation(self, request: web.Request) -> web.StreamResponse:
        """Route by prompt prefix, then relay the replica's answer (streamed or not)."""
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError as e:
            raise APIError(400, f"request body is not valid JSON: {e}", code="invalid_json") from None
        text = routing_text(request.path, body)
        while True:  # a replica that refuses the connection is skipped: nothing was sent yet
            try:
                replica = self.policy.acquire(text)
            except NoHealthyReplica as e:
                raise APIError(503, str(e), code="no_healthy_replica") from None
            try:
                return await self._relay(request, replica, raw)
            except _ConnectFailed:
                continue
            finally:
                self.policy.release(replica)

    async def proxy_any(self, request: web.Request) -> web.StreamResponse:
        """Forward an informational request to the least-loaded healthy replica."""
        try:
            replica = self.policy.acquire("")
        except NoHealthyReplica as e:
            raise APIError(503, str(e), code="no_healthy_replica") from None
        try:
            return await self._relay(request, replica, await request.read())
        finally:
            self.policy.release(replica)

    async def _relay(self, request: web.Request, replica: ReplicaState, raw: bytes) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        url = replica.url + request.path_qs
        response: web.StreamResponse | None = None
        try:
            async with self.session.request(request.method, url, data=raw, headers=headers) as upstream:
                out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS}
                out_headers[REPLICA_HEADER] = replica.url
                response = web.StreamResponse(status=upstream.status, headers=out_headers)
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
                return response
        except aiohttp.ClientConnectorError as e:
            logger.warning("replica %s refused the connection: %r", replica.url, e)
            self.policy.set_health(replica.url, False)
            raise _ConnectFailed from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError) as e:
            logger.warning("replica %s failed mid-request: %r", replica.url, e)
            self.policy.set_health(replica.url, False)
            err = APIError(502, f"replica {replica.url} failed: {type(e).__name__}", code="replica_failed")
            if response is None:
                raise err from None
            await response.write(err.to_sse())  # the stream had started: end it with an error event
            return response

    async def health(self, _request: web.Request) -> web.Response:
        healthy = [r.url for r in self.policy.replicas.values() if r.healthy]
        return web.json_response({"status": "ok" if healthy else "unavailable", "healthy": healthy},
                                 status=200 if healthy else 503)

    async def stats(self, _request: web.Request) -> web.Response:
        return web.json_response({"policy": self.policy.config.policy, "replicas": [
            {"url": r.url, "healthy": r.healthy, "in_flight": r.in_flight, "routed": r.routed,
             "failures": r.failures} for r in self.policy.replicas.values()]})


ROUTER_KEY = web.AppKey("radixlm_router", Router)


def create_router_app(config: RouterConfig, bind_host: str | None = None,
                      allowed_hosts: str | None = None) -> web.Application:
    """The router's aiohttp application; with ``bind_host``, the servers' Host, Origin and JSON-only
    checks too (``runtime.server.origin_checks``: the router is the public face of the replicas)."""
    from radixlm.runtime.server.app import error_middleware  # same error shape as the servers behind it
    from radixlm.runtime.server.origin_checks import origin_middleware

    router = Router(config)
    middlewares = [error_middleware]
    if bind_host is not None:
        middlewares.append(origin_middleware(bind_host, allowed_hosts))
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=middlewares)
    app[ROUTER_KEY] = router
    app.on_startup.append(router.start)
    app.on_cleanup.append(router.stop)
    for path in GENERATION_ROUTES:
        app.router.add_post(path, router.proxy_generation)
    for path in FORWARDED_GET_ROUTES:
        app.router.add_get(path, router.proxy_any)
    for path in FORWARDED_POST_ROUTES:
        app.router.add_post(path, router.proxy_any)
    FanOutRoutes(router).register(app)
    app.router.add_get("/health", router.health)
    app.router.add_get("/router/stats", router.stats)
    return app


def run_router(config: RouterConfig, host: str = "127.0.0.1", port: int = 30000,
               allowed_hosts: str | None = None) -> None:
    """Serve the router until SIGINT/SIGTERM (aiohttp's runner handles both and exits cleanly)."""
    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:  # uvloop is not available on Windows
        loop = asyncio.new_event_loop()
    logger.info("routing %s over %s", config.routing.policy, ", ".join(config.workers))
    web.run_app(create_router_app(config, host, allowed_hosts), host=host, port=port, print=None, loop=loop)
