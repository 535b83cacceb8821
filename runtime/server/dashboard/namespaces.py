"""How the dashboard names a radix-cache namespace: its tenant and salt, never an anonymous mix.

A namespace (the engine's ``extra_key``, built by ``auth.cache_namespace``) is ``None`` (no
tenant, no salt), a tenant id (``tenant-`` and 24 hex digits, a hash of its API key), a salt
(``{"cache_salt": ...}`` / ``{"extra_key": ...}`` / ``{"request": ...}`` as JSON), or
``<tenant>/<salt>``. The label shows the tenant's first hex digits and the kind of salt; the key
itself never reaches the dashboard.
"""

from __future__ import annotations

import json
from typing import Any

TENANT_PREFIX = "tenant-"
TENANT_LEN = len(TENANT_PREFIX) + 24


def split_namespace(namespace: str | None) -> tuple[str | None, str | None]:
    """``(tenant, salt)`` of a namespace (either may be None)."""
    if namespace is None:
        return None, None
    if namespace.startswith(TENANT_PREFIX) and len(namespace) >= TENANT_LEN:
        tenant, rest = namespace[:TENANT_LEN], namespace[TENANT_LEN:]
        if not rest:
            return tenant, None
        if rest.startswith("/"):
            return tenant, rest[1:]
    return None, namespace


def salt_label(salt: str) -> str:
    """``cache_salt=x``, ``extra_key=x``, ``per-request`` (isolation) or the raw text."""
    try:
        fields = json.loads(salt)
    except ValueError:
        return salt
    if not isinstance(fields, dict):
        return salt
    if "request" in fields:
        return "per-request"
    return ", ".join(f"{k}={v}" for k, v in sorted(fields.items()))


def namespace_view(namespace: str | None) -> dict[str, Any]:
    """``{"tenant", "salt", "label"}``: ``tenant`` is the tenant id (None without several keys)."""
    tenant, salt = split_namespace(namespace)
    parts = [f"tenant {tenant[len(TENANT_PREFIX):len(TENANT_PREFIX) + 8]}" if tenant else "shared"]
    if salt is not None:
        parts.append(salt_label(salt))
    return {"tenant": tenant, "salt": None if salt is None else salt_label(salt), "label": " · ".join(parts)}
