"""API keys: where they come from, how a request is checked, and the cache namespace each key owns.

Keys come from ``--api-key`` (repeatable), ``--api-key-file`` (one per line) and the
``RADIXLM_API_KEY`` environment variable (comma-separated); the file and the variable keep keys
out of ``ps``. With several keys, each is a tenant: its requests run in their own radix-cache
namespace (the engine's ``extra_key``), derived from a hash of the key, so tenants never share
cached prefixes and ``cached_tokens`` tells one nothing about another's prompts.

Admin routes (``/flush_cache``, ``/abort_request`` with ``abort_all`` or another tenant's rid,
``/metrics``, all tenants' totals in ``/get_server_info``) need an admin caller: one holding
``--admin-api-key``, or anyone when no key is configured, or the only key when there is one key
and no admin key. Other tenants see and abort only their own requests.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from aiohttp import web
from radixlm.runtime.server.http_errors import APIError

API_KEY_ENV = "RADIXLM_API_KEY"
ADMIN_KEY_ENV = "RADIXLM_ADMIN_API_KEY"
OPEN_PATHS = frozenset({"/health"})
TENANT_KEY = web.RequestKey("radixlm_tenant", str)  # set on a request when several keys are configured
ADMIN_KEY = web.RequestKey("radixlm_admin", bool)  # set on every authenticated request
# the tenant of the request the running task serves: the engine requests it starts are its own
CURRENT_TENANT: ContextVar[str | None] = ContextVar("radixlm_tenant", default=None)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def check_api_key(key: Any, source: str) -> str:
    """A key must be a non-empty string without whitespace or commas (the variable's separator)."""
    if not isinstance(key, str) or not key or any(c.isspace() or c == "," for c in key):
        raise ValueError(f"{source}: an API key must be a non-empty string without whitespace or commas")
    return key


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


def cache_namespace(tenant: str | None, salt: str | None, isolation: str = "shared") -> str | None:
    """The engine's ``extra_key``: the tenant's namespace, split further by the request's salt.

    ``salt`` is :func:`~.request_fields.read_cache_salt`'s tagged form, so ``cache_salt: "x"`` and
    ``extra_key: "x"`` name different namespaces. Under ``isolation="per-request"`` a request
    without a salt gets a namespace of its own (shared by its choices and phases only). Every
    namespace of a tenant starts with its id and a ``/``, and ids have a fixed length, so no salt of
    one tenant can name a namespace of another."""
    if salt is None and isolation == "per-request":
        salt = json.dumps({"request": uuid.uuid4().hex})
    if tenant is None:
        return salt
    return tenant if salt is None else f"{tenant}/{salt}"


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
