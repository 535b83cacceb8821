"""The HTTP server: application factory, middlewares, and start-up / graceful shutdown.

``create_app(engine, config)`` wires the native routes (:mod:`.native.api`) and the OpenAI
routes (:mod:`.openai.api`) behind the middlewares: errors (every failure becomes an
OpenAI-shaped JSON error), the URL limit (414), authentication (:mod:`.transport.access`; ``/health`` stays
open) and the body limit (aiohttp's ``client_max_size``, answered with 413; a compressed body is
inflated in bounded steps by :mod:`.transport.body`, so the limit also holds after decompression).

``serve(engine, config)`` runs until SIGINT/SIGTERM (or ``stop`` is set): it then answers every new
request, ``/health`` included, with a 503 (``code: shutting_down``, so a load balancer takes it out
of rotation; the port stays open), gives in-flight requests ``graceful_shutdown_s`` to finish, and
cuts the rest: their engine requests are aborted and their handlers answer 503 (a stream: an error
event, then ``data: [DONE]``) within ``CUT_MARGIN_S``, after which the connections and the port close. Connections go through
:mod:`.connection_guard` (per-client cap, header timeout). ``BackgroundServer`` runs the same in a
thread, for tests, benchmarks and notebooks.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
from collections.abc import Awaitable, Callable

from aiohttp import web
from radixlm.runtime.server.anthropic import AnthropicRoutes
from radixlm.runtime.server.dashboard.routes import DashboardRoutes, public_paths
from radixlm.runtime.server.native.api import NativeRoutes, ServerInfoRoutes
from radixlm.runtime.server.ollama import OllamaRoutes
from radixlm.runtime.server.openai.api import OpenAIRoutes
from radixlm.runtime.server.openai.embeddings import EmbeddingsRoutes
from radixlm.runtime.server.responses import ResponsesRoutes
from radixlm.runtime.server.transport.access import (
    OPEN_PATHS,
    AllowedOrigins,
    auth_middleware,
    cors_headers,
    origin_middleware,
    preflight_middleware,
)
from radixlm.runtime.server.transport.body import APIError, error_response, from_exception
from radixlm.runtime.server.transport.connection_guard import ConnectionGuard, GuardedSite
from radixlm.runtime.server.transport.state import ServedEngine, ServerConfig, ServerState

logger = logging.getLogger("radixlm.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
STATE_KEY = web.AppKey("radixlm_state", ServerState)
MAX_URL_BYTES = 8192  # longer URLs (path and query) get a JSON 414
# aiohttp's parser answers a request line over max_line_size (8190 by default) with a plain-text
# 400 that no middleware sees; it parses URLs up to this size instead, so the URL middleware
# answers them in JSON. Header limits (max_field_size 8190, max_headers 128) stay aiohttp's.
PARSER_MAX_LINE = 1 << 20
CUT_MARGIN_S = 2.0  # after the grace: how long cut handlers get to send their 503 / last events
RANDOM_WEIGHTS_NOTE = (" -- the embedded tiny model has RANDOM weights and answers in noise; serve a real "
                       "checkpoint with --model-path DIR")


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every exception a handler or a middleware raises becomes an error body with the right status,
    in the shape of the protocol the path belongs to (:func:`error_response`)."""
    try:
        return await handler(request)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as e:  # noqa: BLE001 - the one place errors become responses
        err = from_exception(e)
        if err.status == 500:
            logger.exception("%s %s failed", request.method, request.path)
        return error_response(request.path, err)




@web.middleware
async def handler_count_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Counts running handlers, so that the shutdown knows when every request has been answered."""
    state = request.app[STATE_KEY]
    state.handlers += 1
    try:
        return await handler(request)
    finally:
        state.handlers -= 1
        if state.guard is not None:  # the next request's headers are timed from here
            state.guard.request_done(request.transport)


@web.middleware
async def drain_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """503 for every request that arrives once the shutdown has begun (those running go on)."""
    if request.app[STATE_KEY].draining:
        raise APIError(503, "the server is shutting down", code="shutting_down", retry_after_s=1)
    return await handler(request)


@web.middleware
async def url_limit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """414 for a URL over ``MAX_URL_BYTES``, before authentication or routing look at it."""
    if len(request.raw_path) > MAX_URL_BYTES:
        raise APIError(414, f"the URL is {len(request.raw_path)} bytes, more than {MAX_URL_BYTES}; "
                       "send large inputs in the request body", code="uri_too_long")
    return await handler(request)


def create_app(engine: ServedEngine, config: ServerConfig | None = None) -> web.Application:
    """The aiohttp application serving ``engine`` (an ``Engine``, or anything with the members of
    :class:`~radixlm.runtime.server.transport.state.ServedEngine`)."""
    config = config or ServerConfig()
    origins = AllowedOrigins(engine.server_args.allowed_origins)
    middlewares = [handler_count_middleware, error_middleware, drain_middleware, url_limit_middleware]
    if origins:  # an allowed origin's preflight is answered before the checks and authentication
        middlewares.append(preflight_middleware(origins))
    middlewares.append(origin_middleware(config.host, engine.server_args.allowed_hosts, origins.allows))
    dashboard = bool(engine.server_args.enable_dashboard)
    if config.keys or config.admin_api_key:  # the dashboard's page is open, its data needs the admin key
        open_paths = OPEN_PATHS | public_paths() if dashboard else OPEN_PATHS
        middlewares.append(auth_middleware(config.keys, config.admin_api_key, open_paths))
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=middlewares,
                          handler_args={"max_line_size": PARSER_MAX_LINE, "auto_decompress": False})
    state = ServerState(engine, config)
    app[STATE_KEY] = state
    if origins:
        app.on_response_prepare.append(cors_headers(origins))
    NativeRoutes(state).register(app)
    OpenAIRoutes(state).register(app)
    ResponsesRoutes(state).register(app)
    AnthropicRoutes(state).register(app)
    OllamaRoutes(state).register(app)
    EmbeddingsRoutes(state).register(app)
    ServerInfoRoutes(state).register(app)
    if dashboard:
        DashboardRoutes(state).register(app)
    return app


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket (``port`` 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


async def serve(engine: ServedEngine, config: ServerConfig, stop: asyncio.Event | None = None,
                sock: socket.socket | None = None, on_ready: Callable[[int], None] | None = None,
                handle_signals: bool = True) -> None:
    """Serve until SIGINT/SIGTERM or ``stop``; then drain (see the module docstring) and return."""
    stop = stop or asyncio.Event()
    app = create_app(engine, config)
    args = engine.server_args
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=CUT_MARGIN_S / 2,
                           keepalive_timeout=args.http_keepalive_timeout_s)
    await runner.setup()
    sock = sock or bind_socket(config.host, config.port)
    guard = app[STATE_KEY].guard = ConnectionGuard(args.max_connections_per_client, args.http_header_timeout_s,
                                                   args.forwarded_allow_ips)
    site = GuardedSite(runner, sock, guard)
    await site.start()
    port = sock.getsockname()[1]
    app[STATE_KEY].port = port
    loop = asyncio.get_running_loop()
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    served = app[STATE_KEY]
    what = served.engine.summary().line() if hasattr(served.engine, "summary") else served.model_name
    logger.info("radixlm serving %s; listening on http://%s:%d%s", what, config.host, port,
                RANDOM_WEIGHTS_NOTE if served.random_weights else "")
    if on_ready is not None:
        on_ready(port)
    try:
        await stop.wait()
    finally:
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        await _drain(runner, app[STATE_KEY], config.graceful_shutdown_s)


async def _drain(runner: web.AppRunner, state: ServerState, grace_s: float) -> None:
    """Stop accepting, give the running handlers ``grace_s``, cut the rest (see the module docstring)."""
    state.draining = True  # new requests get 503 from here on (drain_middleware); the port closes at cleanup
    logger.info("shutting down: %d request(s) in flight", state.handlers)
    if not await _until_idle(state, grace_s):
        logger.warning("graceful shutdown: cutting %d engine request(s) after %.1f s", state.cut_all(), grace_s)
        await _until_idle(state, CUT_MARGIN_S)
    await runner.cleanup()  # closes idle connections; a handler still running is cancelled
    state.prompts.close()
    state.json_pool.shutdown(wait=False, cancel_futures=True)


async def _until_idle(state: ServerState, timeout_s: float) -> bool:
    """Wait until no handler runs, at most ``timeout_s``; True if none does."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while state.handlers and loop.time() < end:
        await asyncio.sleep(0.02)
    return not state.handlers


class BackgroundServer:
    """Runs :func:`serve` in a daemon thread with its own event loop (uvloop when available).

    ``with BackgroundServer(engine) as srv: requests to srv.url`` -- the port is picked freely
    unless ``config.port`` is non-zero.
    """

    def __init__(self, engine: ServedEngine, config: ServerConfig | None = None, use_uvloop: bool = True):
        self.engine = engine
        self.config = config or ServerConfig(port=0)
        self.use_uvloop = use_uvloop
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="radixlm-http", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the HTTP server did not start in time")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        loop = _new_loop(self.use_uvloop)
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main())
        except BaseException as e:  # noqa: BLE001 - reported to the starting thread
            self._error = e
            self._ready.set()
        finally:
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        sock = bind_socket(self.config.host, self.config.port)

        def ready(port: int) -> None:
            self.port = port
            self._ready.set()

        await serve(self.engine, self.config, self._stop, sock=sock, on_ready=ready, handle_signals=False)

    def stop(self, timeout: float = 60.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _new_loop(use_uvloop: bool) -> asyncio.AbstractEventLoop:
    if use_uvloop:
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:
            pass
    return asyncio.new_event_loop()
