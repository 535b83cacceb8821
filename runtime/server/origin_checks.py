"""Browser-borne requests kept out: the ``Host`` check, the ``Origin`` check and JSON-only POST bodies.

A server on loopback is still reachable from a browser on the same machine: a page can POST a
``text/plain`` body cross-origin without a CORS preflight (CSRF), and a DNS name rebound to
127.0.0.1 makes the browser treat the server as the page's own origin (DNS rebinding). So:

- ``Host`` must name this server: the loopback names (``localhost``, ``127.0.0.1``, ``::1``) when
  bound to loopback, the bound address when bound to one, any name when bound to every interface
  (``0.0.0.0`` / ``::``); ``--allowed-hosts`` replaces that set (``*``: no check), the bound address
  itself always staying allowed. Otherwise 421.
- A request carrying an ``Origin`` header (browsers send it on every cross-origin and every POST
  request) must come from this server's own origin, or from a host ``--allowed-hosts`` lists; otherwise
  403 -- unless ``--allowed-origins`` lists it (:mod:`.cors`).
- A POST, PUT or PATCH with a body must say ``Content-Type: application/json`` (a ``charset``, if
  any, ``utf-8``); otherwise 415. Bodiless POSTs (``/flush_cache``) pass whatever their type. Ollama's
  routes (``/api/``) read JSON whatever the type, as Ollama does (its documentation's ``curl -d``
  sends a form type): a browser's cross-site form post carries an ``Origin`` and is refused above.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from radixlm.runtime.server.http_errors import APIError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
ANY_TYPE_PREFIXES = ("/api/",)  # Ollama's routes: JSON whatever the Content-Type


def allowed_host_names(bind_host: str, allowed_hosts: str | None) -> frozenset[str] | None:
    """The host names a request's ``Host`` may carry (None: any). ``allowed_hosts`` is the flag's
    comma-separated list (``*`` allows any); unset, the names follow from ``bind_host``."""
    host = _strip_brackets(bind_host.strip().lower())
    if allowed_hosts is not None:
        names = {_strip_brackets(n.strip().lower()) for n in allowed_hosts.split(",") if n.strip()}
        # the bound address itself stays allowed (no DNS name, so no rebinding): the router's and
        # local health checks' requests name it
        return None if "*" in names else frozenset(names | {host})
    if host in WILDCARD_BINDS:
        return None
    if host in LOOPBACK_NAMES or _is_loopback(host):
        return LOOPBACK_NAMES | {host}
    return frozenset({host})


def host_name(netloc: str) -> str:
    """``netloc`` (``name[:port]`` or ``[v6][:port]``) without its port, lower-cased."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1:].split("]", 1)[0]
    if netloc.count(":") == 1:
        return netloc.rsplit(":", 1)[0]
    return netloc


def origin_middleware(bind_host: str, allowed_hosts: str | None,
                      cors_allows: Callable[[str], bool] | None = None) -> Any:
    """The checks of the module docstring, as one aiohttp middleware; an ``Origin`` that
    ``cors_allows`` (``--allowed-origins``, :mod:`.cors`) passes the origin check."""
    allowed = allowed_host_names(bind_host, allowed_hosts)
    # other origins a browser may send from: only the names --allowed-hosts lists explicitly
    origins = allowed if allowed_hosts is not None and allowed is not None else frozenset()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host", "")
        if allowed is not None and host_name(host) not in allowed:
            raise APIError(421, f"the Host header {host!r} does not name this server; allowed: "
                           f"{', '.join(sorted(allowed))} (see --allowed-hosts)", code="host_not_allowed")
        origin = request.headers.get("Origin")
        if origin is not None and not _same_origin(origin, host, origins) \
                and not (cors_allows is not None and cors_allows(origin)):
            raise APIError(403, f"cross-origin request from {origin!r} refused", code="cross_origin")
        if request.method in BODY_METHODS and not request.path.startswith(ANY_TYPE_PREFIXES):
            check_json_content_type(request)
        return await handler(request)

    return check


def check_json_content_type(request: web.Request) -> None:
    """415 unless the body is declared ``application/json``; an empty body's type is not checked
    (clients send bodiless POSTs as ``application/octet-stream``; the ``Origin`` check covers forms)."""
    declared = request.headers.get("Content-Type")
    if not request.body_exists:
        return
    charset = (request.charset or "utf-8").lower()
    if declared is None or request.content_type.lower() != "application/json" or charset not in ("utf-8", "utf8"):
        raise APIError(415, f"Content-Type must be application/json, got {declared!r}",
                       param="Content-Type", code="unsupported_media_type")


def _same_origin(origin: str, host: str, others: frozenset[str]) -> bool:
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False  # "null" (sandboxed pages, file:) and anything else unparseable
    if parts.netloc.lower() == host.strip().lower():
        return True
    return host_name(parts.netloc) in others


def _strip_brackets(name: str) -> str:
    return name[1:-1] if name.startswith("[") and name.endswith("]") else name


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
