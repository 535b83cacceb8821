"""Inspection as JSON for the dashboard: the engine's requests and radix tree, decoded, labelled by tenant
namespace.

How the dashboard names a radix-cache namespace: its tenant and salt, never an anonymous mix.

A namespace (the engine's ``extra_key``, built by ``auth.cache_namespace``) is ``None`` (no
tenant, no salt), a tenant id (``tenant-`` and 24 hex digits, a hash of its API key), a salt
(``{"cache_salt": ...}`` / ``{"extra_key": ...}`` / ``{"request": ...}`` as JSON), or
``<tenant>/<salt>``. The label shows the tenant's first hex digits and the kind of salt; the key
itself never reaches the dashboard.

The engine's inspection (``Engine.inspect``) as the dashboard's JSON: decoded text, tenant labels.

Text is decoded here, in a worker thread (the tokenizer may take a while over many nodes), and
sent as plain JSON strings: the page writes it with ``textContent`` only.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from radixlm.runtime.server.transport.state import ServedTokenizer

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


@runtime_checkable
class InspectedEngine(Protocol):
    """What the dashboard reads of an engine besides ``ServedEngine`` (``Engine.inspect``); an
    engine without it still serves the charts, and its tree and tables answer 501."""

    def inspect(self, max_nodes: int = 64, shown_ids: int = 32, events_since: int = 0,
                requests_since: int = 0) -> dict[str, Any]: ...


def decode(tokenizer: ServedTokenizer, ids: list[int]) -> str:
    """The ids' text, special tokens included (a node may start or end inside a character: the
    replacement character then stands for the cut bytes)."""
    try:
        return tokenizer.decode(ids, skip_special_tokens=False)
    except Exception:  # noqa: BLE001 - an id outside the vocabulary must not hide the node
        return ""


def tree_view(tokenizer: ServedTokenizer, tree: dict[str, Any] | None) -> dict[str, Any] | None:
    """The snapshot with each namespace labelled and each node's ``text``."""
    if tree is None:
        return None
    spaces = []
    for ns in tree["namespaces"]:
        nodes = [{**node, "text": decode(tokenizer, node["token_ids"])} for node in ns["nodes"]]
        spaces.append({**namespace_view(ns["namespace"]), "tokens": ns["tokens"], "nodes": nodes})
    return {**tree, "namespaces": spaces}


def inspection_view(tokenizer: ServedTokenizer, raw: dict[str, Any]) -> dict[str, Any]:
    """``Engine.inspect``'s answer for the page: namespaces as labels, token ids also as text."""
    evictions = [{**{k: v for k, v in e.items() if k != "namespace"}, **namespace_view(e["namespace"]),
                  "text": decode(tokenizer, e["token_ids"])} for e in raw["evictions"]]
    requests = [{**{k: v for k, v in r.items() if k != "namespace"}, **namespace_view(r["namespace"])}
                for r in raw["requests"]]
    return {"radix_cache": raw["radix_cache"], "tree": tree_view(tokenizer, raw["tree"]),
            "evictions": evictions, "eviction_seq": raw["eviction_seq"], "requests": requests,
            "request_seq": raw["request_seq"], "grammars": raw["grammars"]}
