"""The router's routes that ask every replica, not one: cache flush, abort, load, server info, metrics.

A replica's *rank* is its index in the router's worker list (``dp_rank`` in the answers, as SGLang
numbers its data-parallel ranks). Only replicas in rotation are asked; each answer is read whole
(these routes' bodies are small) within ``RouterConfig.fanout_timeout_s``.

- ``POST /flush_cache``: every replica flushes; 200 only if all did (400 otherwise, as a
  replica answers while requests run); the routing tree forgets the replicas that flushed.
- ``POST /abort_request``: sent to every replica (the router does not remember where a rid went);
  ``success`` if any replica aborted something, ``aborted`` the total count.
- ``GET /get_load``: every replica's entries, renumbered by rank and naming the ``replica``.
- ``GET /get_server_info`` (and ``/server_info``): the lowest-ranked replica's answer, with
  ``internal_states`` holding every replica's (one per rank, as SGLang's) and ``dp_size`` the replicas.
- ``GET /metrics``: the replicas' metrics merged (:mod:`radixlm.runtime.router.metrics_merge`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from radixlm.runtime.router.metrics_merge import merge_metrics
from radixlm.runtime.server.http_errors import APIError

if TYPE_CHECKING:
    from radixlm.runtime.router.router import Router


@dataclass
class ReplicaReply:
    """One replica's answer to a fanned-out request; ``status`` is None when it could not be reached."""

    rank: int
    url: str
    status: int | None
    body: bytes = b""

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None


class FanOutRoutes:
    """Handlers of the fanned-out routes of ``router``; ``register`` adds them to an application."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def register(self, app: web.Application) -> None:
        app.router.add_post("/flush_cache", self.flush_cache)  # POST only, as the servers
        app.router.add_post("/abort_request", self.abort_request)
        app.router.add_get("/get_load", self.get_load)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_get("/metrics", self.metrics)

    @property
    def ranks(self) -> dict[str, int]:
        return {url: rank for rank, url in enumerate(self.router.policy.replicas)}

    async def fan_out(self, request: web.Request, path: str, method: str = "GET") -> list[ReplicaReply]:
        """Send ``request``'s body to ``path`` on every replica in rotation; replies in rank order."""
        raw = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        if "Authorization" in request.headers:  # the replicas check the API key
            headers["Authorization"] = request.headers["Authorization"]
        timeout = aiohttp.ClientTimeout(total=self.router.config.fanout_timeout_s)
        ranks = self.ranks

        async def ask(url: str) -> ReplicaReply:
            try:
                async with self.router.session.request(method, url + path, data=raw or None, headers=headers,
                                                       timeout=timeout) as resp:
                    return ReplicaReply(ranks[url], url, resp.status, await resp.read())
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                return ReplicaReply(ranks[url], url, None)

        healthy = [r.url for r in self.router.policy.replicas.values() if r.healthy]
        if not healthy:
            raise APIError(503, "no healthy replica is available", code="no_healthy_replica")
        return list(await asyncio.gather(*(ask(u) for u in healthy)))

    async def flush_cache(self, request: web.Request) -> web.Response:
        """Every replica flushes its radix cache; 200 only if all of them did."""
        replies = await self.fan_out(request, "/flush_cache", "POST")
        flushed = {r.url: r.status == 200 for r in replies}
        for url, ok in flushed.items():
            if ok:
                self.router.policy.forget(url)
        failed = [url for url, ok in flushed.items() if not ok]
        message = f"not flushed on {', '.join(failed)}" if failed else f"cache flushed on {len(replies)} replicas"
        return web.json_response({"success": not failed, "message": message, "flushed": flushed},
                                 status=400 if failed else 200)

    async def abort_request(self, request: web.Request) -> web.Response:
        """Abort ``rid`` (or everything) on whichever replicas run it."""
        replies = await self.fan_out(request, "/abort_request", "POST")
        answered = [r for r in replies if r.status is not None]
        ok = [r for r in answered if r.status == 200 and isinstance(r.json(), dict)]
        if not ok:  # a bad request is bad on every replica: relay the first replica's own error
            if not answered:
                raise APIError(502, "no replica answered /abort_request", code="replica_failed")
            first = answered[0]
            return web.Response(body=first.body, status=first.status, content_type="application/json")
        bodies = {r.url: r.json() for r in ok}
        aborted = sum(int(b.get("aborted") or 0) for b in bodies.values())
        body: dict[str, Any] = {"success": any(b.get("success") for b in bodies.values()),
                                "rid": next(iter(bodies.values())).get("rid"), "aborted": aborted,
                                "replicas": bodies}
        if not body["success"]:
            body["message"] = next(iter(bodies.values())).get("message")
        return web.json_response(body)

    async def get_load(self, request: web.Request) -> web.Response:
        """SGLang's ``/get_load`` list: one entry per replica (per rank), ``dp_rank`` its rank."""
        entries: list[dict[str, Any]] = []
        for r in await self.fan_out(request, "/get_load"):
            body = r.json() if r.status == 200 else None
            for entry in body if isinstance(body, list) else []:
                if isinstance(entry, dict):
                    entries.append({**entry, "dp_rank": r.rank, "replica": r.url})
        return web.json_response(entries)

    async def server_info(self, request: web.Request) -> web.Response:
        """The lowest-ranked replica's server info, with every replica's live ``internal_states``."""
        replies = [(r, r.json()) for r in await self.fan_out(request, "/get_server_info")]
        good = [(r, b) for r, b in replies if r.status == 200 and isinstance(b, dict)]
        if not good:
            raise APIError(502, "no replica answered /get_server_info", code="replica_failed")
        info = dict(good[0][1])
        info["internal_states"] = [s for _, b in good for s in b.get("internal_states") or []]
        info["dp_size"] = len(self.router.policy.replicas)
        answered = {r.url for r, _ in good}
        info["router"] = {"policy": self.router.policy.config.policy,
                          "replicas": [{"dp_rank": rank, "url": url, "answered": url in answered}
                                       for url, rank in self.ranks.items()]}
        return web.json_response(info)

    async def metrics(self, request: web.Request) -> web.Response:
        """Every replica's ``/metrics``, merged: counters and histograms summed, gauges as documented."""
        replies = await self.fan_out(request, "/metrics")
        scrapes = {r.rank: r.body.decode("utf-8", "replace") for r in replies if r.status == 200}
        urls = {rank: url for url, rank in self.ranks.items()}
        text = await asyncio.get_running_loop().run_in_executor(None, merge_metrics, scrapes, urls)
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})
