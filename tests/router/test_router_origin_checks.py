"""The router (``serve --dp-size N``'s public face) makes the servers' browser checks too (issue 47,
item 6): a foreign Host is a 421, a foreign Origin a 403, a non-JSON POST body a 415, and
``GET /flush_cache`` a 405, all answered before any replica is asked."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from radixlm.runtime.router.router import RouterConfig, create_router_app

NO_REPLICA = "http://127.0.0.1:9"  # nothing listens: every probe below must be answered by the router


async def _probe(app: web.Application, probes: list[tuple[str, str, dict, bytes | None]]) -> list[int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as session:
            statuses = []
            for method, path, headers, data in probes:
                headers = {k: v.format(port=port) for k, v in headers.items()}
                async with session.request(method, f"http://127.0.0.1:{port}{path}", headers=headers,
                                           data=data) as resp:
                    body = await resp.json(content_type=None)
                    assert set(body["error"]) == {"message", "type", "param", "code"}, body
                    statuses.append(resp.status)
            return statuses
    finally:
        await runner.cleanup()


def test_the_router_refuses_browser_borne_requests():
    app = create_router_app(RouterConfig(workers=[NO_REPLICA]), bind_host="127.0.0.1")
    statuses = asyncio.run(_probe(app, [
        ("GET", "/get_server_info", {"Host": "rebound.attacker.test"}, None),
        ("POST", "/abort_request", {"Origin": "http://evil.example"}, b'{"abort_all": true}'),
        ("POST", "/abort_request", {"Content-Type": "text/plain"}, b'{"abort_all": true}'),
        ("POST", "/generate", {"Content-Type": "text/plain", "Host": "localhost:{port}"}, b'{"text": "x"}'),
        ("GET", "/flush_cache", {}, None),
    ]))
    assert statuses == [421, 403, 415, 415, 405]
