"""CORS: the browser origins ``--allowed-origins`` names may call the API.

Off by default: no CORS header is sent, and :mod:`.origin_checks` refuses cross-origin requests
(403). With ``--allowed-origins https://app.example,http://localhost:5173`` (``*``: any origin),
a request whose ``Origin`` is listed passes the origin check and its response (streams and errors
included) carries ``Access-Control-Allow-Origin`` (the origin itself, with ``Vary: Origin``) and
``Access-Control-Expose-Headers``; its preflight (``OPTIONS`` with
``Access-Control-Request-Method``) is answered 204 before authentication, as browsers send no key
with it. Requests from other origins are answered as without the flag.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from radixlm.runtime.server.request_fields import IGNORED_HEADER

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ANY = "*"
METHODS = "GET, POST, DELETE, OPTIONS"
EXPOSED = f"{IGNORED_HEADER}, Retry-After"
MAX_AGE_S = 600  # how long a browser may reuse a preflight's answer


class AllowedOrigins:
    """The origins of ``--allowed-origins`` (comma-separated ``scheme://host[:port]``, or ``*``)."""

    def __init__(self, text: str | None):
        self.any = False
        self.origins: frozenset[str] = frozenset()
        if text is None:
            return
        names = [n.strip() for n in text.split(",") if n.strip()]
        self.any = ANY in names
        self.origins = frozenset(normalize_origin(n) for n in names if n != ANY)

    def __bool__(self) -> bool:
        return self.any or bool(self.origins)

    def allows(self, origin: str | None) -> bool:
        """Whether a request carrying this ``Origin`` header may be answered with CORS headers."""
        if origin is None or not self:
            return False
        try:
            return self.any or normalize_origin(origin) in self.origins
        except ValueError:
            return False  # "null" and other non-URL origins


def normalize_origin(origin: str) -> str:
    """``HTTPS://App.Example:443/`` -> ``https://app.example:443`` (ValueError if not an http(s) origin)."""
    parts = urlsplit(origin.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") \
            or parts.query or parts.fragment:
        raise ValueError(f"an origin is scheme://host[:port], got {origin!r}")
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def preflight_middleware(allowed: AllowedOrigins) -> Any:
    """Answers an allowed origin's preflight with 204 (before authentication and routing)."""

    @web.middleware
    async def preflight(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers \
                and allowed.allows(origin):
            asked = request.headers.get("Access-Control-Request-Headers")
            headers = {"Access-Control-Allow-Methods": METHODS, "Access-Control-Max-Age": str(MAX_AGE_S)}
            if asked:
                headers["Access-Control-Allow-Headers"] = asked
            return web.Response(status=204, headers=headers)
        return await handler(request)

    return preflight


def cors_headers(allowed: AllowedOrigins) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """An ``on_response_prepare`` hook adding the CORS headers to every answer to an allowed origin."""

    async def add(request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if allowed.allows(origin):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = EXPOSED
            response.headers.add("Vary", "Origin")

    return add
