"""Tenants stay apart (issue 47, item 6): admin routes need the admin key, a tenant sees and aborts
only its own requests, and browser-borne requests (text/plain POSTs, GET /flush_cache, a foreign
Host or Origin) are refused. Every probe runs on a live in-process server on loopback.

The held stream comes from :class:`HoldingEngine`: its streamed requests wait until aborted, so
"A's stream is still running when B tries to abort it" is an event, not a race against time."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import aiohttp
import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.access import allowed_host_names, host_name
from radixlm.runtime.server.transport.state import ServerConfig
from radixlm.runtime.server_args import ServerArgs

from radixlm.__main__ import build_parser

KEY_A, KEY_B, ADMIN = "tenant-key-a", "tenant-key-b", "admin-key-z"
HANG_GUARD_S = 120  # a guard only: every wait below ends on an event


class HoldingEngine:
    """The real engine, except that a streamed request yields one chunk, then waits for its abort."""

    def __init__(self, engine: Engine, **server_args: object):
        self._engine = engine
        self.server_args = dataclasses.replace(engine.server_args, **server_args)
        self.aborted: list[str] = []
        self.flushes = 0
        self._held: dict[str, asyncio.Event] = {}

    def __getattr__(self, name):
        return getattr(self._engine, name)

    async def async_generate(self, rid=None, stream=False, **kwargs):
        if not stream:
            return await self._engine.async_generate(rid=rid, stream=False, **kwargs)
        self._held[rid] = asyncio.Event()
        return self._hold(rid)

    async def _hold(self, rid: str):
        yield {"text": "x", "output_ids": [1], "meta_info": {"id": rid, "completion_tokens": 1,
                                                             "finish_reason": None}}
        await asyncio.wait_for(self._held[rid].wait(), HANG_GUARD_S)
        yield {"text": "x", "output_ids": [1], "meta_info": {"id": rid, "completion_tokens": 1,
                                                             "finish_reason": {"type": "abort"}}}

    def abort(self, rid: str) -> None:
        self.aborted.append(rid)
        if rid in self._held:
            self._held[rid].set()
        self._engine.abort(rid)

    def flush_cache(self) -> bool:
        self.flushes += 1
        return self._engine.flush_cache()


@pytest.fixture(scope="module")
def engine():
    eng = Engine(max_total_tokens=4096, random_seed=0, context_length=512)
    yield eng
    eng.shutdown()


def _server(engine, config: ServerConfig, **server_args):
    return BackgroundServer(HoldingEngine(engine, **server_args), config)


@pytest.fixture(scope="module")
def tenants(engine):
    with _server(engine, ServerConfig(port=0, api_keys=(KEY_A, KEY_B), admin_api_key=ADMIN)) as srv:
        yield srv


@pytest.fixture(scope="module")
def tenants_no_admin(engine):
    with _server(engine, ServerConfig(port=0, api_keys=(KEY_A, KEY_B))) as srv:
        yield srv


@pytest.fixture(scope="module")
def open_server(engine):
    with _server(engine, ServerConfig(port=0)) as srv:
        yield srv


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _send(session, url, method, body=None, data=None, headers=None):
    async with session.request(method, url, json=body, data=data, headers=headers) as resp:
        text = await resp.text()
        return resp.status, (json.loads(text) if "json" in resp.headers.get("Content-Type", "") else text)


def call(srv, path, body=None, *, method=None, data=None, headers=None):
    """(status, parsed body) of one request."""
    method = method or ("GET" if body is None and data is None else "POST")

    async def go():
        async with aiohttp.ClientSession() as session:
            return await _send(session, srv.url + path, method, body, data, headers)

    return asyncio.run(go())


def assert_error(result, status, code=None):
    got, body = result
    assert got == status, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]


def with_held_stream(srv, rid, probes, closer=ADMIN):
    """Open tenant A's stream ``rid``, run ``probes(session)`` while it is held open, let ``closer``
    abort it, then return (the probes' result, the closing abort's answer, the stream's events)."""
    async def go():
        async with aiohttp.ClientSession() as session:
            body = {"text": "tenant A's stream", "stream": True, "rid": rid, "sampling_params": {"max_new_tokens": 4}}
            async with session.post(srv.url + "/generate", json=body, headers=bearer(KEY_A)) as resp:
                assert resp.status == 200, await resp.text()
                lines = resp.content.__aiter__()
                first = await asyncio.wait_for(lines.__anext__(), HANG_GUARD_S)
                assert first.startswith(b"data: "), first
                out = await probes(session)
                # the closer ends the stream (every probe above ran while it was held open)
                status, ab = await _send(session, srv.url + "/abort_request", "POST", {"rid": rid},
                                         headers=bearer(closer))
                events = [line async for line in lines if line.startswith(b"data: ")]
                return out, (status, ab), events

    return asyncio.run(asyncio.wait_for(go(), HANG_GUARD_S))


def test_another_tenant_cannot_abort_or_see_a_stream(tenants):
    url = tenants.url

    async def probes(session):
        return [await _send(session, url + "/abort_request", "POST", {"abort_all": True}, headers=bearer(KEY_B)),
                await _send(session, url + "/abort_request", "POST", {"rid": "a-stream-1"}, headers=bearer(KEY_B)),
                await _send(session, url + "/get_server_info", "GET", headers=bearer(KEY_B)),
                await _send(session, url + "/get_server_info", "GET", headers=bearer(KEY_A))]

    (abort_all, abort_rid, info_b, info_a), admin_abort, events = with_held_stream(tenants, "a-stream-1", probes)
    assert_error(abort_all, 403, code="admin_only")
    assert abort_rid[0] == 200 and abort_rid[1]["success"] is False and abort_rid[1]["aborted"] == 0, abort_rid
    assert info_b[0] == 200 and info_b[1]["inflight_requests"] == 0, info_b[1]["inflight_requests"]
    assert "num_running_reqs" not in info_b[1]["stats"] and "finished_requests" not in info_b[1]["stats"]
    assert info_a[1]["inflight_requests"] == 1
    assert admin_abort[0] == 200 and admin_abort[1]["aborted"] == 1, admin_abort
    assert tenants.engine.aborted.count("a-stream-1") == 1  # only the admin's abort reached the engine
    assert json.loads(events[-2][len(b"data: "):])["meta_info"]["finish_reason"]["type"] == "abort"


def test_the_owner_aborts_its_own_rid(tenants):
    async def probes(session):
        return await _send(session, tenants.url + "/abort_request", "POST", {"rid": "a-stream-2"},
                           headers=bearer(KEY_A))

    own, _, _ = with_held_stream(tenants, "a-stream-2", probes)
    assert own[0] == 200 and own[1]["aborted"] == 1, own


def test_without_an_admin_key_a_tenant_aborts_only_its_own_rids(tenants_no_admin):
    async def probes(session):
        return await _send(session, tenants_no_admin.url + "/abort_request", "POST", {"rid": "a-stream-3"},
                           headers=bearer(KEY_B))

    other, own, _ = with_held_stream(tenants_no_admin, "a-stream-3", probes, closer=KEY_A)
    assert other[0] == 200 and other[1]["aborted"] == 0 and "no running request" in other[1]["message"], other
    assert own[0] == 200 and own[1]["aborted"] == 1, own
    assert tenants_no_admin.engine.aborted.count("a-stream-3") == 1


def test_flush_cache_and_metrics_need_the_admin_key(tenants):
    before = tenants.engine.flushes
    for key in (KEY_A, KEY_B):
        err = assert_error(call(tenants, "/flush_cache", {}, headers=bearer(key)), 403, code="admin_only")
        assert err["type"] == "permission_error" and "--admin-api-key" in err["message"], err
        assert_error(call(tenants, "/metrics", headers=bearer(key)), 403, code="admin_only")
    assert tenants.engine.flushes == before
    assert call(tenants, "/flush_cache", {}, headers=bearer(ADMIN))[0] == 200
    assert tenants.engine.flushes == before + 1
    assert call(tenants, "/metrics", headers=bearer(ADMIN))[0] == 200
    info = call(tenants, "/get_server_info", headers=bearer(ADMIN))[1]
    assert "num_running_reqs" in info["stats"] and "admin" not in json.dumps(info)


def test_without_an_admin_key_admin_routes_are_refused(tenants_no_admin):
    for key in (KEY_A, KEY_B):
        assert_error(call(tenants_no_admin, "/flush_cache", {}, headers=bearer(key)), 403, code="admin_only")
        assert_error(call(tenants_no_admin, "/abort_request", {"abort_all": True}, headers=bearer(key)), 403)
    assert tenants_no_admin.engine.flushes == 0


def test_one_key_alone_keeps_the_admin_routes(engine):
    with _server(engine, ServerConfig(port=0, api_key=KEY_A)) as srv:
        assert call(srv, "/flush_cache", {}, headers=bearer(KEY_A))[0] == 200
        assert call(srv, "/abort_request", {"abort_all": True}, headers=bearer(KEY_A))[0] == 200


def test_admin_key_must_differ_from_the_api_keys():
    with pytest.raises(ValueError, match="admin_api_key"):
        ServerConfig(api_keys=(KEY_A,), admin_api_key=KEY_A)


def test_the_flags_parse():
    ns = build_parser().parse_args(["serve", "--api-key", KEY_A, "--admin-api-key", ADMIN,
                                    "--allowed-hosts", "api.example", "--cache-isolation", "per-request"])
    assert (ns.admin_api_key, ns.allowed_hosts, ns.cache_isolation) == (ADMIN, "api.example", "per-request")
    assert ServerArgs.from_cli_args(ns).allowed_hosts == "api.example"
    with pytest.raises(ValueError, match="allowed_hosts"):
        ServerArgs(allowed_hosts=" , ")


# ---------------------------------------------------------------------- browsers: CSRF, rebinding


def test_non_json_post_bodies_are_refused(open_server):
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                  "application/json; charset=latin-1"):
        err = assert_error(call(open_server, "/abort_request", data=b'{"abort_all": true}',
                                headers={"Content-Type": ctype}), 415, code="unsupported_media_type")
        assert err["param"] == "Content-Type"
    assert_error(call(open_server, "/generate", data=b'{"text": "hi"}'), 415)  # a body without a type
    for ctype in ("application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"):
        status, out = call(open_server, "/abort_request", data=b'{"abort_all": true}',
                           headers={"Content-Type": ctype})
        assert status == 200, out
    assert open_server.engine.aborted == []  # nothing was running; no refused body reached the engine


def test_flush_cache_is_post_only(open_server):
    before = open_server.engine.flushes
    assert_error(call(open_server, "/flush_cache", method="GET"), 405)
    assert open_server.engine.flushes == before
    assert call(open_server, "/flush_cache", method="POST")[0] == 200  # no body, no type: a client's flush
    assert call(open_server, "/flush_cache", {})[0] == 200


def test_foreign_host_and_origin_are_refused(open_server):
    port = open_server.port
    for host in ("evil.example", f"evil.example:{port}", "rebound.attacker.test:80"):
        assert_error(call(open_server, "/get_server_info", headers={"Host": host}), 421, code="host_not_allowed")
        assert_error(call(open_server, "/flush_cache", {}, headers={"Host": host}), 421)
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "LOCALHOST"):
        assert call(open_server, "/get_server_info", headers={"Host": host})[0] == 200
    for origin in ("http://evil.example", "null", f"http://localhost:{port + 1}"):
        assert_error(call(open_server, "/abort_request", {"abort_all": True}, headers={"Origin": origin}), 403,
                     code="cross_origin")
    assert call(open_server, "/flush_cache", {}, headers={"Origin": f"http://127.0.0.1:{port}"})[0] == 200


def test_allowed_hosts_configures_the_host_check(engine):
    with _server(engine, ServerConfig(port=0), allowed_hosts="api.example,[::1]") as srv:
        assert call(srv, "/get_server_info", headers={"Host": "api.example:443"})[0] == 200
        assert call(srv, "/get_server_info")[0] == 200  # the bound address itself stays allowed
        assert_error(call(srv, "/get_server_info", headers={"Host": f"localhost:{srv.port}"}), 421)
        assert call(srv, "/flush_cache", {}, headers={"Host": "api.example", "Origin": "https://api.example"})[0] == 200
    with _server(engine, ServerConfig(port=0), allowed_hosts="*") as srv:
        assert call(srv, "/get_server_info", headers={"Host": "anything.example"})[0] == 200


def test_allowed_host_names_follow_the_bind_address():
    assert allowed_host_names("0.0.0.0", None) is None and allowed_host_names("::", None) is None
    assert {"localhost", "127.0.0.1", "::1"} <= allowed_host_names("127.0.0.1", None)
    assert "127.0.0.2" in allowed_host_names("127.0.0.2", None)
    assert allowed_host_names("10.0.0.5", None) == {"10.0.0.5"}
    assert allowed_host_names("10.0.0.5", "a.example, B.example") == {"a.example", "b.example", "10.0.0.5"}
    assert allowed_host_names("0.0.0.0", "a.example") == {"a.example", "0.0.0.0"}
    assert allowed_host_names("127.0.0.1", " * ") is None
    assert [host_name(h) for h in ("[::1]:80", "Host:1", "h", "::1")] == ["::1", "host", "h", "::1"]
