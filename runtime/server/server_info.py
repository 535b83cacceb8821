"""``GET /`` and ``GET /version``: what this server is, for health probes and clients that detect servers.

``/version`` answers ``{"version": ...}`` (vLLM's route and shape); ``/`` names the server, its
version, the served model and where each API lives.
"""

from __future__ import annotations

from aiohttp import web
from radixlm.runtime.server.state import ServerState

from radixlm import __version__

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
