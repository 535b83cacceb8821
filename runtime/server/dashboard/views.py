"""The engine's inspection (``Engine.inspect``) as the dashboard's JSON: decoded text, tenant labels.

Text is decoded here, in a worker thread (the tokenizer may take a while over many nodes), and
sent as plain JSON strings: the page writes it with ``textContent`` only.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from radixlm.runtime.server.dashboard.namespaces import namespace_view
from radixlm.runtime.server.engine_api import ServedTokenizer


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
