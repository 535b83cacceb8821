"""Server hardening: body depth, default max_tokens, Retry-After, long URLs, several API keys with
their own cache namespaces, cache salts, tool-schema checks on arrival, and abort metrics."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import subprocess
import sys
import urllib.error
import urllib.request

import aiohttp
import pytest
from radixlm.runtime.engine.engine import Engine, QueueFullError
from radixlm.runtime.server.app import MAX_URL_BYTES, BackgroundServer
from radixlm.runtime.server.transport.access import API_KEY_ENV, load_api_keys, tenant_id
from radixlm.runtime.server.transport.body import from_exception, nesting_depth
from radixlm.runtime.server.transport.state import ServerConfig
from radixlm.runtime.server_args import ServerArgs

from radixlm.__main__ import build_parser

KEY_A, KEY_B = "key-alpha", "key-beta"
JSON_TYPE = {"Content-Type": "application/json"}  # POST bodies must say so (415 otherwise)
DEFAULT_MAX = 6  # the engine's max_new_tokens_default in this module
MSG = [{"role": "user", "content": "hello there"}]
BAD_TOOL_SCHEMAS = {
    "wrong type": ({"type": 123}, "#/type"),
    "cyclic ref": ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
                   "#/$defs/"),
    "dangling ref": ({"type": "object", "properties": {"x": {"$ref": "#/$defs/nope"}}}, "#/properties/x/$ref"),
}


class RecordingEngine:
    """The real engine, with every ``extra_key`` it is given written down."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self.extra_keys: list[str | None] = []

    def __getattr__(self, name):
        return getattr(self._engine, name)

    async def async_generate(self, **kwargs):
        self.extra_keys.append(kwargs.get("extra_key"))
        return await self._engine.async_generate(**kwargs)


class FullQueueEngine(RecordingEngine):
    """Every submission finds the waiting queue full."""

    async def async_generate(self, **kwargs):
        raise QueueFullError("too many queued requests (max_queued_requests=1)")


@pytest.fixture(scope="module")
def engine():
    eng = Engine(max_total_tokens=8192, random_seed=0, context_length=1024, max_new_tokens_default=DEFAULT_MAX)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def open_server(engine):
    with BackgroundServer(engine, ServerConfig(port=0)) as srv:
        yield srv


@pytest.fixture(scope="module")
def tenant_server(engine):
    recording = RecordingEngine(engine)
    with BackgroundServer(recording, ServerConfig(port=0, api_keys=(KEY_A, KEY_B))) as srv:
        yield srv


async def _request(url, method, body=None, data=None, headers=None):
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, json=body, data=data, headers=headers) as resp:
            text = await resp.text()
            parsed = json.loads(text) if "json" in resp.headers.get("Content-Type", "") else text
            return resp.status, parsed, resp.headers


def call(srv, path, body=None, *, method=None, data=None, headers=None):
    """(status, parsed body, headers) of one request."""
    method = method or ("GET" if body is None and data is None else "POST")
    return asyncio.run(_request(srv.url + path, method, body, data, headers))


def assert_error(result, status, param=None, code=None, contains=None) -> dict:
    got, body, _ = result
    assert got == status, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"} and isinstance(err["message"], str)
    for key, want in (("param", param), ("code", code)):
        if want is not None:
            assert err[key] == want, err
    if contains is not None:
        assert contains in err["message"], err
    return err


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def cached(result) -> int:
    status, body, _ = result
    assert status == 200, body
    if "usage" in body:
        return body["usage"]["prompt_tokens_details"]["cached_tokens"]
    return body["meta_info"]["cached_tokens"]


# ---------------------------------------------------------------------- 1. JSON depth


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _random_json(rng: random.Random, level: int = 0):
    if level > 7 or rng.random() < 0.3:
        return rng.choice([1, None, 2.5, "a[b{", '"]}', "\\", "\\\\[", '\\"[[', "x\\\\\\\"{"])
    if rng.random() < 0.5:
        return [_random_json(rng, level + 1) for _ in range(rng.randint(0, 3))]
    keys = [rng.choice(["k", "[", '"{', "\\"]) + str(i) for i in range(rng.randint(0, 3))]
    return {key: _random_json(rng, level + 1) for key in keys}


def test_nesting_depth_ignores_brackets_in_strings_and_matches_a_recursive_count():
    rng = random.Random(0)
    for _ in range(2000):
        value = _random_json(rng)
        raw = json.dumps(value, ensure_ascii=rng.random() < 0.5).encode()
        assert nesting_depth(raw) == _depth(value), raw
    assert nesting_depth(b"[" * 10000) == 10000
    assert nesting_depth(b"[" * 10000, limit=256) > 256


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions", "/abort_request"])
def test_a_body_10000_levels_deep_is_a_400_on_every_route(open_server, path):
    assert_error(call(open_server, path, data=b"[" * 10000, headers=JSON_TYPE), 400, code="json_too_deep", contains="max_json_depth")
    deep = {"text": "hi", "sampling_params": {"json_schema": json.loads("[" * 300 + "]" * 300)}}
    assert_error(call(open_server, path, deep), 400, code="json_too_deep")


def test_depth_limit_leaves_strings_and_engine_schema_limits_alone(open_server):
    status, body, _ = call(open_server, "/generate", {"text": "[{" * 300, "sampling_params": {"max_new_tokens": 1}})
    assert status == 200, body
    schema = {"type": "string"}
    for _ in range(70):  # 141 levels: past the engine's max_schema_depth, inside the body limit
        schema = {"type": "object", "properties": {"a": schema}}
    body = {"text": "hi", "sampling_params": {"json_schema": schema}}
    err = assert_error(call(open_server, "/generate", body), 400)
    assert "max_schema_depth" in err["message"] and err["code"] != "json_too_deep"


def test_max_json_depth_is_a_server_arg_and_a_flag():
    assert ServerArgs().max_json_depth == 256
    with pytest.raises(ValueError, match="max_json_depth"):
        ServerArgs(max_json_depth=100)  # could not carry a schema of max_schema_depth (128)
    with pytest.raises(ValueError, match="max_json_depth"):
        ServerArgs(max_json_depth=10_000)
    ns = build_parser().parse_args(["serve", "--max-json-depth", "300", "--max-new-tokens-default", "64"])
    args = ServerArgs.from_cli_args(ns)
    assert (args.max_json_depth, args.max_new_tokens_default) == (300, 64)


# ---------------------------------------------------------------------- 2. default max_tokens


def test_openai_requests_without_max_tokens_get_the_server_default(open_server):
    body = {"messages": MSG, "ignore_eos": True, "temperature": 0}
    status, out, _ = call(open_server, "/v1/chat/completions", body)
    assert status == 200 and out["usage"]["completion_tokens"] == DEFAULT_MAX, out
    assert out["choices"][0]["finish_reason"] == "length"
    status, out, _ = call(open_server, "/v1/chat/completions", {**body, "max_tokens": DEFAULT_MAX + 3})
    assert out["usage"]["completion_tokens"] == DEFAULT_MAX + 3
    # completions keep OpenAI's documented default of 16; /generate keeps SGLang's 128
    status, out, _ = call(open_server, "/v1/completions", {"prompt": "Once", "ignore_eos": True})
    assert status == 200 and out["usage"]["completion_tokens"] == 16, out
    status, out, _ = call(open_server, "/generate", {"text": "Once", "sampling_params": {"ignore_eos": True}})
    assert status == 200 and out["meta_info"]["completion_tokens"] == 128, out


# ---------------------------------------------------------------------- 3. Retry-After


def test_503_queue_full_carries_retry_after(engine):
    with BackgroundServer(FullQueueEngine(engine), ServerConfig(port=0)) as srv:
        for path, body in (("/generate", {"text": "hi"}), ("/v1/completions", {"prompt": "hi"}),
                           ("/v1/chat/completions", {"messages": MSG, "stream": True})):
            result = call(srv, path, body)
            assert_error(result, 503, code="queue_full")
            assert int(result[2]["Retry-After"]) >= 1


# ---------------------------------------------------------------------- 4. long URLs


def test_a_url_over_8kb_gets_a_json_414(open_server):
    for path in ("/v1/models?pad=" + "x" * MAX_URL_BYTES, "/" + "a" * (MAX_URL_BYTES + 1),
                 "/generate?" + "q" * 100_000):
        result = call(open_server, path)
        assert_error(result, 414, code="uri_too_long")
        assert result[2]["Content-Type"].startswith("application/json")
    assert call(open_server, "/v1/models?pad=" + "x" * 4000)[0] == 200
    # header limits stay aiohttp's (8190 bytes a field)
    assert call(open_server, "/v1/models", headers={"X-Big": "y" * 9000})[0] in (400, 431)


# ---------------------------------------------------------------------- 5. API keys


def test_keys_come_from_flags_a_file_and_the_environment(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("# team keys\nk-file-1\n\n  k-file-2  \nk-flag\n")
    keys = load_api_keys(["k-flag"], str(path), {API_KEY_ENV: "k-env-1, k-env-2"})
    assert keys == ["k-flag", "k-file-1", "k-file-2", "k-env-1", "k-env-2"]
    assert load_api_keys(environ={}) == []
    (tmp_path / "empty.txt").write_text("# nothing\n")
    for bad in (dict(key_file=str(tmp_path / "empty.txt")), dict(key_file=str(tmp_path / "missing")),
                dict(flag_keys=["has space"])):
        with pytest.raises(ValueError):
            load_api_keys(**bad)
    ns = build_parser().parse_args(["serve", "--api-key", "a", "--api-key", "b", "--api-key-file", str(path)])
    assert ns.api_key == ["a", "b"] and ns.api_key_file == str(path)
    assert tenant_id(KEY_A) != tenant_id(KEY_B) and KEY_A not in tenant_id(KEY_A)
    assert tenant_id(KEY_A) == tenant_id(KEY_A)  # stable: replicas behind a router agree


def _status(url: str, key: str | None) -> int:
    req = urllib.request.Request(url, headers=bearer(key) if key else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def test_serve_takes_keys_from_a_file_and_the_environment_off_the_command_line(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("k-from-file\n")
    argv = [sys.executable, "-m", "radixlm", "serve", "--port", "0", "--api-key-file", str(path),
            "--max-total-tokens", "4096"]
    proc = subprocess.Popen(argv, env={**os.environ, API_KEY_ENV: "k-from-env"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:  # the start-up line names the port
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if m:
                break
        assert m, "the server did not start"
        url = f"http://127.0.0.1:{m.group(1)}/v1/models"
        assert [_status(url, k) for k in ("k-from-file", "k-from-env", "k-other", None)] == [200, 200, 401, 401]
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_every_configured_key_is_accepted_and_others_are_not(tenant_server):
    for key in (KEY_A, KEY_B):
        assert call(tenant_server, "/v1/models", headers=bearer(key))[0] == 200
    assert_error(call(tenant_server, "/v1/models", headers=bearer("key-gamma")), 401, code="invalid_api_key")
    assert_error(call(tenant_server, "/v1/models"), 401)
    assert call(tenant_server, "/health")[0] == 200


def test_each_key_has_its_own_cache_namespace(tenant_server):
    body = {"model": "default", "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "user", "content": "The lighthouse keeper counted the tenant ships"}]}
    first_a = cached(call(tenant_server, "/v1/chat/completions", body, headers=bearer(KEY_A)))
    again_a = cached(call(tenant_server, "/v1/chat/completions", body, headers=bearer(KEY_A)))
    first_b = cached(call(tenant_server, "/v1/chat/completions", body, headers=bearer(KEY_B)))
    again_b = cached(call(tenant_server, "/v1/chat/completions", body, headers=bearer(KEY_B)))
    assert first_a == 0 and again_a > 0 and first_b == 0 and again_b > 0
    # a tenant's salt splits its own namespace further, and never reaches another tenant's
    salted = {**body, "cache_salt": "s1"}
    assert cached(call(tenant_server, "/v1/chat/completions", salted, headers=bearer(KEY_A))) == 0
    assert cached(call(tenant_server, "/v1/chat/completions", salted, headers=bearer(KEY_B))) == 0
    keys = tenant_server.engine.extra_keys
    assert all(k and KEY_A not in k and KEY_B not in k for k in keys), keys
    assert {tenant_id(KEY_A), tenant_id(KEY_B), f'{tenant_id(KEY_A)}/{{"cache_salt": "s1"}}'} <= set(keys)


# ---------------------------------------------------------------------- 6. cache salts


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions"])
def test_cache_salt_and_extra_key_separate_cached_prefixes(open_server, path):
    text = f"Salted prompt for {path}: the keeper trimmed every wick before dusk"
    base = {"/generate": {"text": text, "sampling_params": {"max_new_tokens": 1}},
            "/v1/completions": {"prompt": text, "max_tokens": 1},
            "/v1/chat/completions": {"messages": [{"role": "user", "content": text}], "max_tokens": 1}}[path]
    alpha, beta = f"alpha{path}", f"beta{path}"  # namespaces span routes: one pair of salts per route
    assert cached(call(open_server, path, {**base, "cache_salt": alpha})) == 0
    assert cached(call(open_server, path, {**base, "cache_salt": beta})) == 0
    assert cached(call(open_server, path, {**base, "cache_salt": alpha})) > 0
    assert cached(call(open_server, path, {**base, "extra_key": beta})) == 0  # SGLang's name: its own namespace
    assert cached(call(open_server, path, {**base, "cache_salt": alpha, "extra_key": beta})) == 0
    for field, value in (("cache_salt", 7), ("extra_key", ["a"]), ("cache_salt", "")):
        assert_error(call(open_server, path, {**base, field: value}), 400, param=field)


# ---------------------------------------------------------------------- 7. tool schemas


@pytest.mark.parametrize("case", sorted(BAD_TOOL_SCHEMAS))
@pytest.mark.parametrize("tool_choice", ["auto", "none", "required"])
def test_invalid_tool_schemas_are_rejected_on_arrival(open_server, case, tool_choice):
    schema, pointer = BAD_TOOL_SCHEMAS[case]
    tools = [{"type": "function", "function": {"name": "ok", "parameters": {"type": "object"}}},
             {"type": "function", "function": {"name": "broken", "parameters": schema}}]
    body = {"messages": MSG, "tools": tools, "tool_choice": tool_choice, "max_tokens": 4}
    err = assert_error(call(open_server, "/v1/chat/completions", body), 400, param="tools[1].function.parameters")
    assert pointer in err["message"] and "Error" not in err["message"], err


def test_recursive_tool_schemas_that_descend_are_fine(open_server):
    node = {"$defs": {"node": {"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 1}}}}, "$ref": "#/$defs/node"}
    tools = [{"type": "function", "function": {"name": "tree", "parameters": node}}]
    status, out, _ = call(open_server, "/v1/chat/completions", {"messages": MSG, "tools": tools, "max_tokens": 4})
    assert status == 200, out


def test_error_messages_never_carry_python_exception_text():
    class ConstraintError(ValueError):
        pass

    err = from_exception(ConstraintError("json_schema: compile failed: TypeError: 'int' object is not iterable"))
    assert err.status == 400 and "TypeError" not in err.message and "iterable" not in err.message
    err = from_exception(KeyError("secret internals"))
    assert err.status == 500 and "secret" not in err.message and "KeyError" not in err.message


# ---------------------------------------------------------------------- 8. abort metrics


def _outcomes(srv) -> dict[str, float]:
    _, text, _ = call(srv, "/metrics")
    found = (re.match(r'radixlm:requests_total\{model_name="[^"]*",outcome="(\w+)"\} (\S+)$', line)
             for line in text.splitlines())
    return {m.group(1): float(m.group(2)) for m in found if m}


def test_requests_ended_by_abort_request_count_as_abort(open_server):
    before = _outcomes(open_server)
    body = {"text": "Count every wave", "stream": True, "rid": "hardening-abort",
            "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True}}

    async def run():
        async with aiohttp.ClientSession() as session:
            async with session.post(open_server.url + "/generate", json=body) as resp:
                assert resp.status == 200, await resp.text()
                events = []
                async for line in resp.content:
                    if line.startswith(b"data: "):
                        events.append(line[6:].strip())
                        if len(events) == 2:
                            async with session.post(open_server.url + "/abort_request",
                                                    json={"rid": "hardening-abort"}) as r:
                                assert r.status == 200
                return events

    events = asyncio.run(run())
    assert events[-1] == b"[DONE]" and json.loads(events[-2])["meta_info"]["finish_reason"]["type"] == "abort"
    after = _outcomes(open_server)
    assert after["abort"] == before.get("abort", 0) + 1
    assert after["success"] == before["success"]
