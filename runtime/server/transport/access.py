"""Who may call: API keys and tenants, the Host/Origin/JSON-only checks, and CORS for the origins ``--allowed-
origins`` names.

API keys: where they come from, how a request is checked, and the cache namespace each key owns.

Keys come from ``--api-key`` (repeatable), ``--api-key-file`` (one per line) and the
``RADIXLM_API_KEY`` environment variable (comma-separated); the file and the variable keep keys
out of ``ps``. With several keys, each is a tenant: its requests run in their own radix-cache
namespace (the engine's ``extra_key``), derived from a hash of the key, so tenants never share
cached prefixes and ``cached_tokens`` tells one nothing about another's prompts.

Admin routes (``/flush_cache``, ``/abort_request`` with ``abort_all`` or another tenant's rid,
``/metrics``, all tenants' totals in ``/get_server_info``) need an admin caller: one holding
``--admin-api-key``, or anyone when no key is configured, or the only key when there is one key
and no admin key. Other tenants see and abort only their own requests.

Browser-borne requests kept out: the ``Host`` check, the ``Origin`` check and JSON-only POST bodies.

A server on loopback is still reachable from a browser on the same machine: a page can POST a
``text/plain`` body cross-origin without a CORS preflight (CSRF), and a DNS name rebound to
127.0.0.1 makes the browser treat the server as the page's own origin (DNS rebinding). So:

- ``Host`` must name this server: the loopback names (``localhost``, ``127.0.0.1``, ``::1``) when
  bound to loopback, the bound address when bound to one, any name when bound to every interface
  (``0.0.0.0`` / ``::``); ``--allowed-hosts`` replaces that set (``*``: no check), the bound address
  itself always staying allowed. Otherwise 421.
- A request carrying an ``Origin`` header (browsers send it on every cross-origin and every POST
  request) must come from this server's own origin, or from a host ``--allowed-hosts`` lists; otherwise
  403 -- unless ``--allowed-origins`` lists it (CORS, below).
- A POST, PUT or PATCH with a body must say ``Content-Type: application/json`` (a ``charset``, if
  any, ``utf-8``); otherwise 415. Bodiless POSTs (``/flush_cache``) pass whatever their type. Ollama's
  routes (``/api/``) read JSON whatever the type, as Ollama does (its documentation's ``curl -d``
  sends a form type): a browser's cross-site form post carries an ``Origin`` and is refused above.

CORS: the browser origins ``--allowed-origins`` names may call the API.

Off by default: no CORS header is sent, and the origin check above refuses cross-origin requests
(403). With ``--allowed-origins https://app.example,http://localhost:5173`` (``*``: any origin),
a request whose ``Origin`` is listed passes the origin check and its response (streams and errors
included) carries ``Access-Control-Allow-Origin`` (the origin itself, with ``Vary: Origin``) and
``Access-Control-Expose-Headers``; its preflight (``OPTIONS`` with
``Access-Control-Request-Method``) is answered 204 before authentication, as browsers send no key
with it. Requests from other origins are answered as without the flag.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from radixlm.runtime.server.transport.body import IGNORED_HEADER, APIError
from radixlm.runtime.server.transport.state import (
    ADMIN_KEY,
    CURRENT_TENANT,
    TENANT_KEY,
    check_api_key,
)

API_KEY_ENV = "RADIXLM_API_KEY"
ADMIN_KEY_ENV = "RADIXLM_ADMIN_API_KEY"
OPEN_PATHS = frozenset({"/health"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def read_key_file(path: str) -> list[str]:
    """The keys of a file, one per line; blank lines and ``#`` comments are skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ValueError(f"--api-key-file {path!r} cannot be read: {e.strerror}") from None
    keys = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    if not keys:
        raise ValueError(f"--api-key-file {path!r} holds no key")
    return [check_api_key(k, f"--api-key-file {path!r}") for k in keys]


def load_api_keys(flag_keys: Iterable[str] = (), key_file: str | None = None,
                  environ: Mapping[str, str] | None = None) -> list[str]:
    """Every configured key, first occurrence first: the flags, the file, then ``RADIXLM_API_KEY``."""
    keys = [check_api_key(k, "--api-key") for k in flag_keys]
    if key_file is not None:
        keys += read_key_file(key_file)
    env = (environ or {}).get(API_KEY_ENV, "")
    keys += [check_api_key(k.strip(), API_KEY_ENV) for k in env.split(",") if k.strip()]
    return list(dict.fromkeys(keys))


def tenant_id(key: str) -> str:
    """The key's cache namespace: a hash, so the key itself never leaves the auth check."""
    return "tenant-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def is_admin(request: web.Request) -> bool:
    """Whether the caller may act on every tenant (always, when authentication is off)."""
    return request.get(ADMIN_KEY, True)


def forbidden_unless_admin(request: web.Request, what: str, param: str | None = None) -> None:
    """403 naming ``what`` unless the caller is an admin (see the module docstring)."""
    if not is_admin(request):
        raise APIError(403, f"{what} acts on every tenant: it needs the admin key (--admin-api-key)",
                       param=param, code="admin_only")


def auth_middleware(keys: Sequence[str], admin_key: str | None = None,
                    open_paths: frozenset[str] = OPEN_PATHS) -> Any:
    """401 unless ``Authorization: Bearer <one of keys, or admin_key>`` (or ``x-api-key: <key>``); with
    several keys, the request is tagged with its key's tenant (``TENANT_KEY``), and every request with whether it is
    an admin's (``ADMIN_KEY``). Every key is compared, in constant time, so the timing says
    nothing about which key (or how much of one) matched. ``open_paths`` need no key."""
    every = list(dict.fromkeys([*keys, *([admin_key] if admin_key else [])]))
    admins = {admin_key} if admin_key else set(keys) if len(keys) == 1 else set()
    expected = [(k.encode(), tenant_id(k), k in admins) for k in every]
    tag = len(every) > 1

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in open_paths:
            header = request.headers.get("Authorization")
            if header is None and "x-api-key" in request.headers:  # Anthropic's clients send the key here
                header = "Bearer " + request.headers["x-api-key"]
            scheme, _, token = (header or "").partition(" ")
            given = token.strip().encode()
            tenant, admin = None, False
            for key, tid, may_admin in expected:
                if hmac.compare_digest(given, key):
                    tenant, admin = tid, may_admin
            if scheme.lower() != "bearer" or tenant is None:
                raise APIError(401, "missing or invalid API key: send 'Authorization: Bearer <key>'",
                               code="invalid_api_key")
            request[ADMIN_KEY] = admin
            if tag:
                request[TENANT_KEY] = tenant
                token = CURRENT_TENANT.set(tenant)
                try:
                    return await handler(request)
                finally:
                    CURRENT_TENANT.reset(token)
        return await handler(request)

    return check


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
    ``cors_allows`` (``--allowed-origins``, CORS, below) passes the origin check."""
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
