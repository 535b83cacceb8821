"""The dashboard's routes (``--enable-dashboard``; without it none exists and ``/dashboard`` is a 404).

- ``GET /dashboard`` and its assets (``/dashboard/<name>.js|.css``): the page, from the package's
  ``static/`` folder; open (it holds no data), so a browser can load it without a header.
- ``GET /dashboard/api/info``: the model, the bound address, whether keys are configured.
- ``GET /dashboard/api/series``: the per-second samples (``series.SeriesSampler``).
- ``GET /dashboard/api/inspect?max_nodes=&events_since=&requests_since=``: the radix tree's largest
  branches, evictions, recent requests and the grammar cache (``views.inspection_view``).
- ``GET /dashboard/events``: the same live, as server-sent events: ``series`` (the history) and a
  whole ``inspect`` at once, then ``samples`` every second and ``inspect`` (new evictions and
  requests only) every ``feed.INSPECT_EVERY`` seconds, until the client leaves or the server shuts
  down; one feed computed for every subscriber, at most ``MAX_SUBSCRIBERS`` of them (``feed``).
- ``POST /dashboard/api/playground``: one generation streamed with its tokens' origins (``playground``).

Every data route shows other clients' prompt text, so with API keys it needs an admin caller
(``auth.is_admin``: the admin key, or the only key when there is one and no admin key); the page
asks for the key and sends it as an ``Authorization`` header (the event stream is read with
``fetch``, so the key never travels in a URL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web
from radixlm.runtime.server.dashboard.feed import DashboardFeed, FeedFull, SeriesSampler
from radixlm.runtime.server.dashboard.playground import parse_playground, playground_events
from radixlm.runtime.server.dashboard.views import InspectedEngine, inspection_view
from radixlm.runtime.server.transport.access import forbidden_unless_admin
from radixlm.runtime.server.transport.body import APIError, bad_request
from radixlm.runtime.server.transport.sse import open_stream, write_stream
from radixlm.runtime.server.transport.state import ServerState

STATIC = Path(__file__).parent / "static"
ASSETS = {"dashboard.css": "text/css", "dashboard.js": "text/javascript", "charts.js": "text/javascript",
          "tree.js": "text/javascript", "tables.js": "text/javascript", "playground.js": "text/javascript"}
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}
DATA_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
LOOPBACK = ("127.", "::1", "localhost")


def public_paths() -> frozenset[str]:
    """The page and its assets: open to every caller (the data routes are not)."""
    return frozenset({"/dashboard", *(f"/dashboard/{name}" for name in ASSETS)})


def _query_int(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not lo <= value <= hi:
        raise bad_request(f"'{name}' must be an integer in [{lo}, {hi}], got {raw[:40]!r}", param=name,
                          code="invalid_value")
    return value


class DashboardRoutes:
    """The routes of the module docstring over one ``ServerState``."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.sampler = SeriesSampler(state.engine.get_stats, state.metrics.ttft, state.metrics.itl)
        inspect = self._inspection if isinstance(state.engine, InspectedEngine) else None
        self.feed = DashboardFeed(self.sampler, inspect, lambda: state.draining)

    def register(self, app: web.Application) -> None:
        app.router.add_get("/dashboard", self.page)
        for name in ASSETS:
            app.router.add_get(f"/dashboard/{name}", self.asset)
        app.router.add_get("/dashboard/api/info", self.info)
        app.router.add_get("/dashboard/api/series", self.series)
        app.router.add_get("/dashboard/api/inspect", self.inspect)
        app.router.add_get("/dashboard/events", self.events)
        app.router.add_post("/dashboard/api/playground", self.playground)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)

    async def _start(self, app: web.Application) -> None:
        self.sampler.start()

    async def _stop(self, app: web.Application) -> None:
        await self.feed.stop()
        await self.sampler.stop()

    # ------------------------------------------------------------------ the page

    async def page(self, request: web.Request) -> web.Response:
        return web.Response(body=(STATIC / "index.html").read_bytes(), content_type="text/html",
                            charset="utf-8", headers=PAGE_HEADERS)

    async def asset(self, request: web.Request) -> web.Response:
        name = request.path.rsplit("/", 1)[-1]
        return web.Response(body=(STATIC / name).read_bytes(), content_type=ASSETS[name], charset="utf-8",
                            headers=PAGE_HEADERS)

    # ------------------------------------------------------------------ data

    def _admin(self, request: web.Request) -> None:
        forbidden_unless_admin(request, "the dashboard (it shows every client's prompts)")

    async def info(self, request: web.Request) -> web.Response:
        self._admin(request)
        state, config = self.state, self.state.config
        return web.json_response({
            "model": state.model_name, "random_weights": state.random_weights, "host": config.host,
            "port": state.port, "loopback": config.host.startswith(LOOPBACK),
            "auth": "api-keys" if config.keys or config.admin_api_key else "none",
            "tenants": len(config.keys) > 1, "cache_isolation": state.cache_isolation,
            "radix_cache": not state.engine.server_args.disable_radix_cache,
            "inspect": isinstance(state.engine, InspectedEngine)}, headers=DATA_HEADERS)

    async def series(self, request: web.Request) -> web.Response:
        self._admin(request)
        return web.json_response({"period_s": self.sampler.period_s, "samples": list(self.sampler.samples)},
                                 headers=DATA_HEADERS)

    async def _inspection(self, max_nodes: int, events_since: int, requests_since: int) -> dict[str, Any]:
        engine = self.state.engine
        if not isinstance(engine, InspectedEngine):
            raise APIError(501, "this engine offers no inspection (Engine.inspect)", code="not_implemented")

        def read() -> dict[str, Any]:
            raw = engine.inspect(max_nodes=max_nodes, events_since=events_since, requests_since=requests_since)
            return inspection_view(self.state.tokenizer, raw)

        return await self.state.offload(read)

    async def inspect(self, request: web.Request) -> web.Response:
        self._admin(request)
        view = await self._inspection(_query_int(request, "max_nodes", 64, 1, 512),
                                      _query_int(request, "events_since", 0, 0, 1 << 62),
                                      _query_int(request, "requests_since", 0, 0, 1 << 62))
        return web.json_response(view, headers=DATA_HEADERS)

    async def events(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        max_nodes = _query_int(request, "max_nodes", 64, 1, 512)
        try:
            sub, first = await self.feed.subscribe(max_nodes)
        except FeedFull as e:
            raise APIError(503, f"{e}: close another dashboard page or try again later",
                           code="too_many_streams", retry_after_s=5) from None
        try:
            resp = await open_stream(request, DATA_HEADERS)
            for data in first:
                await resp.write(data)
            while (data := await sub.queue.get()) is not None:
                await resp.write(data)
            await resp.write_eof()
        except ConnectionResetError:
            pass
        finally:
            self.feed.unsubscribe(sub)
        return resp

    async def playground(self, request: web.Request) -> web.StreamResponse:
        self._admin(request)
        async with self.state.track("/dashboard/api/playground") as record:
            body = await self.state.read_json(request)
            ids, params, _ = await self.state.offload(parse_playground, self.state, body)
            events = playground_events(self.state, request, ids, params, record)
            return await write_stream(request, events, DATA_HEADERS)
