"""Cached prefixes are not a side channel between clients (issue 47, item 7).

``cached_tokens`` says how much of a prompt another request already computed: a client that may
share another's cache can recover its prompt (a secret PIN took 238 probes). Each API key has its
own namespace; without keys ``--cache-isolation per-request`` keeps every request to itself unless
requests opt in with the same ``cache_salt``; and ``extra_key`` and ``cache_salt`` never name the
same namespace."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import aiohttp
import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig, cache_namespace
from radixlm.runtime.server_args import ServerArgs

KEY_A, KEY_B = "cache-key-a", "cache-key-b"
SECRET = "The account PIN of user 4411 is 7302. Never reveal it; answer only yes or no."


class ConfiguredEngine:
    """The real engine under other HTTP settings (``ServerArgs`` fields the server reads)."""

    def __init__(self, engine: Engine, **server_args: object):
        self._engine = engine
        self.server_args = dataclasses.replace(engine.server_args, **server_args)

    def __getattr__(self, name):
        return getattr(self._engine, name)


@pytest.fixture(scope="module")
def engine():
    eng = Engine(max_total_tokens=4096, random_seed=0, context_length=512)
    yield eng
    eng.shutdown()


def call(srv, path, body, key=None):
    async def go():
        headers = {"Authorization": f"Bearer {key}"} if key else None
        async with aiohttp.ClientSession() as session:
            async with session.post(srv.url + path, json=body, headers=headers) as resp:
                return resp.status, json.loads(await resp.text())

    return asyncio.run(go())


def cached(result) -> int:
    status, body = result
    assert status == 200, body
    if "usage" in body:
        return body["usage"]["prompt_tokens_details"]["cached_tokens"]
    return body["meta_info"]["cached_tokens"]


ROUTES = {
    "/generate": lambda text: {"text": text, "sampling_params": {"max_new_tokens": 1}},
    "/v1/completions": lambda text: {"prompt": text, "max_tokens": 1},
    "/v1/chat/completions": lambda text: {"messages": [{"role": "user", "content": text}], "max_tokens": 1},
}


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_per_request_isolation_hides_one_clients_prompt_from_another(engine, path):
    body = ROUTES[path](f"{path}: {SECRET}")  # the route first: salted namespaces span routes
    with BackgroundServer(ConfiguredEngine(engine, cache_isolation="per-request"), ServerConfig(port=0)) as srv:
        assert cached(call(srv, path, body)) == 0  # the victim
        assert cached(call(srv, path, body)) == 0  # the prober: the same prompt finds nothing cached
        # sharing is opt-in: requests sending the same cache_salt share their prefixes
        salted = {**body, "cache_salt": f"team-1{path}"}
        assert cached(call(srv, path, salted)) == 0
        assert cached(call(srv, path, salted)) > 0
        assert cached(call(srv, path, {**body, "cache_salt": f"team-2{path}"})) == 0


def test_shared_isolation_is_the_single_user_default(engine):
    assert ServerArgs().cache_isolation == "shared"
    body = ROUTES["/generate"](f"{SECRET} (shared)")
    with BackgroundServer(ConfiguredEngine(engine), ServerConfig(port=0)) as srv:
        assert cached(call(srv, "/generate", body)) == 0
        assert cached(call(srv, "/generate", body)) > 0


def test_each_api_key_is_its_own_namespace_by_default(engine):
    body = ROUTES["/v1/chat/completions"](f"{SECRET} (keys)")
    with BackgroundServer(ConfiguredEngine(engine), ServerConfig(port=0, api_keys=(KEY_A, KEY_B))) as srv:
        assert cached(call(srv, "/v1/chat/completions", body, KEY_A)) == 0
        assert cached(call(srv, "/v1/chat/completions", body, KEY_B)) == 0
        assert cached(call(srv, "/v1/chat/completions", body, KEY_B)) > 0


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_extra_key_and_cache_salt_never_share(engine, path):
    body = ROUTES[path](f"{path}: a collision probe; the ferry leaves at nine")
    with BackgroundServer(ConfiguredEngine(engine), ServerConfig(port=0)) as srv:
        x, y = f"x{path}", f"y{path}"  # salted namespaces span routes: one set of salts per route
        assert cached(call(srv, path, {**body, "cache_salt": x})) == 0
        assert cached(call(srv, path, {**body, "extra_key": x})) == 0
        assert cached(call(srv, path, {**body, "extra_key": x})) > 0
        # a pair never collides with a single salt spelled like the pair's encoding
        assert cached(call(srv, path, {**body, "cache_salt": x, "extra_key": y})) == 0
        assert cached(call(srv, path, {**body, "cache_salt": json.dumps([x, y])})) == 0


def test_namespaces_are_tagged_by_their_source():
    salt, extra = json.dumps({"cache_salt": "x"}), json.dumps({"extra_key": "x"})
    assert cache_namespace(None, salt) != cache_namespace(None, extra)
    assert cache_namespace("tenant-a", salt) == f"tenant-a/{salt}"
    assert cache_namespace(None, None) is None and cache_namespace("tenant-a", None) == "tenant-a"
    one, two = cache_namespace(None, None, "per-request"), cache_namespace(None, None, "per-request")
    assert one and two and one != two and cache_namespace(None, salt, "per-request") == salt
    with pytest.raises(ValueError, match="cache_isolation"):
        ServerArgs(cache_isolation="per-key")
