"""The data-parallel router: one HTTP front for several radixlm servers, routing by cached prefix.

``radixlm router --worker URL --worker URL`` (or ``radixlm serve --dp-size N``) runs this app. Each
generation request is proxied, body and (SSE) stream untouched, to the replica that
:class:`~radixlm.runtime.router.policy.RoutingPolicy` picks from the request's text. A background
task probes every replica's ``/health``; a replica that fails a probe or a connection leaves the
rotation (its in-flight requests fail with a 502 error rather than hang) and rejoins once it answers
again. Informational routes and ``/tokenize`` / ``/detokenize`` go to any healthy replica;
``/router/stats`` reports per-replica load and routing counts.

Routes about every replica ask them all (:class:`FanOutRoutes`). A replica's *rank* is its index in
the router's worker list (``dp_rank`` in the answers, as SGLang numbers its data-parallel ranks).
Only replicas in rotation are asked; each answer is read whole (these routes' bodies are small)
within ``RouterConfig.fanout_timeout_s``.

- ``POST /flush_cache``: every replica flushes; 200 only if all did (400 otherwise, as a
  replica answers while requests run); the routing tree forgets the replicas that flushed.
- ``POST /abort_request``: sent to every replica (the router does not remember where a rid went);
  ``success`` if any replica aborted something, ``aborted`` the total count.
- ``GET /get_load``: every replica's entries, renumbered by rank and naming the ``replica``.
- ``GET /get_server_info`` (and ``/server_info``): the lowest-ranked replica's answer, with
  ``internal_states`` holding every replica's (one per rank, as SGLang's) and ``dp_size`` the replicas.
- ``GET /metrics``: one Prometheus exposition from every replica's (:func:`merge_metrics`). Each
  replica exposes its own ``radixlm:*`` families (:mod:`radixlm.runtime.server.metrics`); the router
  parses them with ``prometheus_client``'s text parser and merges them by sample (name plus labels):
  counters and histograms (every ``_bucket``, ``_sum`` and ``_count``) are summed, so rates and
  quantiles over the merged series cover all the traffic; the additive gauges (:data:`SUMMED_GAUGES`:
  running and queued requests, KV slots in use, decode throughput) are summed too; every other gauge
  (``token_usage``, ``cache_hit_rate``, the ``engine_*`` figures) is a ratio or a figure of one
  replica: it is kept per replica under a ``dp_rank`` label, as SGLang labels its schedulers' gauges
  under data parallelism (a dashboard averages them, ``avg by (model_name)``, or shows them per
  rank). The router adds ``radixlm:router_replica_up{dp_rank, replica}``: 1 for each replica whose
  metrics are in the sum, 0 for one that is out of rotation or did not answer (its counters are
  then missing from the sums until it answers again).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample
from radixlm.runtime.router.policy import (
    NoHealthyReplica,
    ReplicaState,
    RoutingConfig,
    RoutingPolicy,
)
from radixlm.runtime.server.metrics import PREFIX
from radixlm.runtime.server.transport.body import APIError

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
    checks too (``runtime.server.transport.access``: the router is the public face of the replicas)."""
    from radixlm.runtime.server.app import error_middleware  # same error shape as the servers behind it
    from radixlm.runtime.server.transport.access import origin_middleware

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


# ---- routes asked of every replica -------------------------------------------------------------


@dataclass
class ReplicaReply:
    """One replica's answer to a fanned-out request; ``status`` is None when it could not be reached."""

    rank: int
    url: str
    status: int | None
    body: bytes = b""

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None


class FanOutRoutes:
    """Handlers of the fanned-out routes of ``router``; ``register`` adds them to an application."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def register(self, app: web.Application) -> None:
        app.router.add_post("/flush_cache", self.flush_cache)  # POST only, as the servers
        app.router.add_post("/abort_request", self.abort_request)
        app.router.add_get("/get_load", self.get_load)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_get("/metrics", self.metrics)

    @property
    def ranks(self) -> dict[str, int]:
        return {url: rank for rank, url in enumerate(self.router.policy.replicas)}

    async def fan_out(self, request: web.Request, path: str, method: str = "GET") -> list[ReplicaReply]:
        """Send ``request``'s body to ``path`` on every replica in rotation; replies in rank order."""
        raw = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        if "Authorization" in request.headers:  # the replicas check the API key
            headers["Authorization"] = request.headers["Authorization"]
        timeout = aiohttp.ClientTimeout(total=self.router.config.fanout_timeout_s)
        ranks = self.ranks

        async def ask(url: str) -> ReplicaReply:
            try:
                async with self.router.session.request(method, url + path, data=raw or None, headers=headers,
                                                       timeout=timeout) as resp:
                    return ReplicaReply(ranks[url], url, resp.status, await resp.read())
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                return ReplicaReply(ranks[url], url, None)

        healthy = [r.url for r in self.router.policy.replicas.values() if r.healthy]
        if not healthy:
            raise APIError(503, "no healthy replica is available", code="no_healthy_replica")
        return list(await asyncio.gather(*(ask(u) for u in healthy)))

    async def flush_cache(self, request: web.Request) -> web.Response:
        """Every replica flushes its radix cache; 200 only if all of them did."""
        replies = await self.fan_out(request, "/flush_cache", "POST")
        flushed = {r.url: r.status == 200 for r in replies}
        for url, ok in flushed.items():
            if ok:
                self.router.policy.forget(url)
        failed = [url for url, ok in flushed.items() if not ok]
        message = f"not flushed on {', '.join(failed)}" if failed else f"cache flushed on {len(replies)} replicas"
        return web.json_response({"success": not failed, "message": message, "flushed": flushed},
                                 status=400 if failed else 200)

    async def abort_request(self, request: web.Request) -> web.Response:
        """Abort ``rid`` (or everything) on whichever replicas run it."""
        replies = await self.fan_out(request, "/abort_request", "POST")
        answered = [r for r in replies if r.status is not None]
        ok = [r for r in answered if r.status == 200 and isinstance(r.json(), dict)]
        if not ok:  # a bad request is bad on every replica: relay the first replica's own error
            if not answered:
                raise APIError(502, "no replica answered /abort_request", code="replica_failed")
            first = answered[0]
            return web.Response(body=first.body, status=first.status, content_type="application/json")
        bodies = {r.url: r.json() for r in ok}
        aborted = sum(int(b.get("aborted") or 0) for b in bodies.values())
        body: dict[str, Any] = {"success": any(b.get("success") for b in bodies.values()),
                                "rid": next(iter(bodies.values())).get("rid"), "aborted": aborted,
                                "replicas": bodies}
        if not body["success"]:
            body["message"] = next(iter(bodies.values())).get("message")
        return web.json_response(body)

    async def get_load(self, request: web.Request) -> web.Response:
        """SGLang's ``/get_load`` list: one entry per replica (per rank), ``dp_rank`` its rank."""
        entries: list[dict[str, Any]] = []
        for r in await self.fan_out(request, "/get_load"):
            body = r.json() if r.status == 200 else None
            for entry in body if isinstance(body, list) else []:
                if isinstance(entry, dict):
                    entries.append({**entry, "dp_rank": r.rank, "replica": r.url})
        return web.json_response(entries)

    async def server_info(self, request: web.Request) -> web.Response:
        """The lowest-ranked replica's server info, with every replica's live ``internal_states``."""
        replies = [(r, r.json()) for r in await self.fan_out(request, "/get_server_info")]
        good = [(r, b) for r, b in replies if r.status == 200 and isinstance(b, dict)]
        if not good:
            raise APIError(502, "no replica answered /get_server_info", code="replica_failed")
        info = dict(good[0][1])
        info["internal_states"] = [s for _, b in good for s in b.get("internal_states") or []]
        info["dp_size"] = len(self.router.policy.replicas)
        answered = {r.url for r, _ in good}
        info["router"] = {"policy": self.router.policy.config.policy,
                          "replicas": [{"dp_rank": rank, "url": url, "answered": url in answered}
                                       for url, rank in self.ranks.items()]}
        return web.json_response(info)

    async def metrics(self, request: web.Request) -> web.Response:
        """Every replica's ``/metrics``, merged: counters and histograms summed, gauges as documented."""
        replies = await self.fan_out(request, "/metrics")
        scrapes = {r.rank: r.body.decode("utf-8", "replace") for r in replies if r.status == 200}
        urls = {rank: url for url, rank in self.ranks.items()}
        text = await asyncio.get_running_loop().run_in_executor(None, merge_metrics, scrapes, urls)
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})


# ---- the replicas' /metrics merged ------------------------------------------------------------

SUMMED_TYPES = frozenset({"counter", "histogram"})
SUMMED_GAUGES = frozenset(PREFIX + name for name in (
    "num_running_reqs", "num_queue_reqs", "num_grammar_queue_reqs", "num_used_tokens", "max_total_num_tokens",
    "gen_throughput"))
RANK_LABEL = "dp_rank"
UP_METRIC = PREFIX + "router_replica_up"


def parse(text: str) -> list[Metric]:
    """One replica's exposition as metric families (``ValueError`` if it is not the text format)."""
    return list(text_string_to_metric_families(text))


def merge_families(scrapes: Mapping[int, list[Metric]]) -> list[Metric]:
    """The merged families of ``scrapes`` (dp_rank -> that replica's parsed families), in the order
    they first appear (the lowest rank's order)."""
    families: dict[str, Metric] = {}
    samples: dict[str, dict[tuple, Sample]] = {}
    for rank, parsed in sorted(scrapes.items()):
        for fam in parsed:
            merged = families.setdefault(fam.name, Metric(fam.name, fam.documentation, fam.type, fam.unit))
            if merged.type != fam.type:  # replicas of different versions: do not add unlike things
                logger.warning("replica %d exposes %s as a %s, not a %s: left out", rank, fam.name,
                               fam.type, merged.type)
                continue
            # replicas may use another --metrics-prefix: the gauges are known by their suffix
            summed = fam.type in SUMMED_TYPES or PREFIX + fam.name.partition(":")[2] in SUMMED_GAUGES
            into = samples.setdefault(fam.name, {})
            for s in fam.samples:
                labels = dict(s.labels) if summed else {**s.labels, RANK_LABEL: str(rank)}
                key = (s.name, tuple(sorted(labels.items())))
                before = into.get(key)
                into[key] = Sample(s.name, labels, s.value + (before.value if before else 0.0))
    for name, fam in families.items():
        fam.samples = list(samples.get(name, {}).values())
    return list(families.values())


def up_family(up: Mapping[int, tuple[str, bool]]) -> Metric:
    """``radixlm:router_replica_up`` from dp_rank -> (replica URL, whether its metrics were merged)."""
    fam = Metric(UP_METRIC, "1 if the replica's metrics are in the router's sums, else 0.", "gauge")
    for rank, (url, ok) in sorted(up.items()):
        fam.add_sample(UP_METRIC, {RANK_LABEL: str(rank), "replica": url}, 1.0 if ok else 0.0)
    return fam


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


def render(families: Iterable[Metric]) -> str:
    """The exposition text (format 0.0.4) of ``families``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry).decode("utf-8")


def merge_metrics(scrapes: Mapping[int, str], urls: Mapping[int, str]) -> str:
    """The router's ``/metrics`` text from dp_rank -> exposition text of the replicas that answered
    and dp_rank -> URL of every replica: the merged families, then the per-replica up gauge."""
    parsed: dict[int, list[Metric]] = {}
    for rank, text in scrapes.items():
        try:
            parsed[rank] = parse(text)
        except ValueError as e:  # one replica's bad answer must not hide the others
            logger.warning("replica %s answered /metrics with unparsable text: %s", urls[rank], e)
    up = {rank: (url, rank in parsed) for rank, url in urls.items()}
    return render([*merge_families(parsed), up_family(up)])
