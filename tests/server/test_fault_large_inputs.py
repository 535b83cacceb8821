"""Large inputs never stall the event loop (issue 47, item 3; issue 60, item 1): a prompt too long to
fit is a 400 before any tokenizing (a cheap check on its characters) on every route that reads text,
tokenizing and template rendering run off the event loop (``/health`` answers while one is in
progress), utility routes never hold up a generation request's tokenizing, a body of too many JSON
values is a 400 before decoding, and a compressed body is bounded while it is inflated (a gzip bomb
gets 413 without the process's memory growing)."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import zlib

import aiohttp
import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.body import APIError, decompress_body, parse_json_body, value_count
from radixlm.runtime.server.transport.state import ServerConfig

GUARD_S = 120.0  # hang guards only
MARKER = "SLOW-TOKENIZE"
BIG = 200_000  # characters: far more than a 256-token context can hold
BODY_LIMIT = 1 << 20
PROBES = 5
MAX_VALUES = 100_000


class GatedTokenizer:
    """The real tokenizer; encoding a text with MARKER waits for ``release``; long texts are counted."""

    def __init__(self, inner):
        self._inner = inner
        self.inside = threading.Event()
        self.release = threading.Event()
        self.big_encodes = 0
        self.busy = False  # a MARKER text is being encoded

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _gate(self, text: str) -> None:
        if len(text) >= BIG:
            self.big_encodes += 1
        if MARKER in text:
            self.busy = True
            self.inside.set()
            self.release.wait(GUARD_S)
            self.busy = False

    def encode(self, text, add_special_tokens=False):
        self._gate(text)
        return self._inner.encode(text, add_special_tokens=add_special_tokens)

    def encode_batch(self, texts, add_special_tokens=False):
        for text in texts:
            self._gate(text)
        return self._inner.encode_batch(texts, add_special_tokens=add_special_tokens)


@pytest.fixture(scope="module")
def served():
    engine = Engine(max_total_tokens=2048, context_length=256, max_json_values=MAX_VALUES)
    gated = engine.tokenizer = GatedTokenizer(engine.tokenizer)
    srv = BackgroundServer(engine, ServerConfig(port=0, max_body_bytes=BODY_LIMIT)).start()
    yield srv, gated
    srv.stop()
    engine.shutdown()


async def _post(session, url, body=None, data=None, headers=None):
    async with session.post(url, json=body, data=data, headers=headers) as resp:
        return resp.status, await resp.read()


@pytest.mark.parametrize("path,body", [
    ("/generate", {"text": MARKER + " hello", "sampling_params": {"max_new_tokens": 2}}),
    ("/v1/completions", {"prompt": MARKER + " hello", "max_tokens": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": MARKER}], "max_tokens": 2}),
    ("/tokenize", {"prompt": MARKER}),
])
def test_health_answers_while_a_prompt_is_tokenized(served, path, body):
    srv, gated = served
    gated.release.clear()
    gated.inside.clear()

    async def run():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as session:
            slow = asyncio.ensure_future(_post(session, srv.url + path, body))
            assert await asyncio.to_thread(gated.inside.wait, GUARD_S)
            during = 0
            for _ in range(PROBES):
                async with session.get(srv.url + "/health") as resp:
                    ok = resp.status == 200
                during += ok and gated.busy  # answered while the tokenizer was still encoding
            gated.release.set()
            status, _ = await slow
            return during, status

    try:
        during, status = asyncio.run(run())
    finally:
        gated.release.set()
    assert during == PROBES and status == 200, (during, status)


@pytest.mark.parametrize("path,body,param", [
    ("/generate", {"text": "a" * BIG, "sampling_params": {"max_new_tokens": 1}}, "text"),
    ("/generate", {"text": ["hi", "a" * BIG], "sampling_params": {"max_new_tokens": 1}}, "text[1]"),
    ("/v1/completions", {"prompt": "a" * BIG, "max_tokens": 1}, "prompt"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a" * BIG}], "max_tokens": 1}, "messages"),
    ("/tokenize", {"prompt": "a" * BIG}, "prompt"),
    ("/tokenize", {"prompt": ["hi", "a" * BIG]}, "prompt[1]"),
    ("/v1/tokenize", {"messages": [{"role": "user", "content": "a" * BIG}]}, "messages"),
    ("/v1/responses", {"input": "a" * BIG, "max_output_tokens": 1}, "input"),
    ("/v1/messages", {"model": "default", "max_tokens": 1, "messages": [{"role": "user", "content": "a" * BIG}]},
     "messages"),
    ("/api/chat", {"model": "default", "messages": [{"role": "user", "content": "a" * BIG}], "stream": False}, "messages"),
    ("/api/generate", {"model": "default", "prompt": "a" * BIG, "stream": False}, "prompt"),
])
def test_prompt_too_long_to_fit_is_rejected_before_tokenizing(served, path, body, param):
    srv, gated = served
    before = gated.big_encodes

    async def run():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as session:
            return await _post(session, srv.url + path, body)

    status, raw = asyncio.run(run())
    assert status == 400 and param in raw.decode() and "context" in raw.decode(), raw
    assert gated.big_encodes == before  # never tokenized


def test_detokenize_takes_at_most_a_context_of_ids(served):
    srv, _ = served

    async def run():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as session:
            return await _post(session, srv.url + "/detokenize", {"tokens": [[1, 2], [1] * 257]})

    status, raw = asyncio.run(run())
    err = json.loads(raw)["error"]
    assert status == 400 and err["param"] == "tokens[1]" and err["code"] == "context_length_exceeded", raw


def test_generation_never_waits_behind_tokenize_calls(served):
    """Two ``/tokenize`` calls hold the utility pool (one encoding, one queued); a ``/generate``
    still tokenizes and answers before either of them is released."""
    srv, gated = served
    gated.release.clear()
    gated.inside.clear()

    async def run():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as session:
            held = [asyncio.ensure_future(_post(session, srv.url + "/tokenize", {"prompt": MARKER}))
                    for _ in range(2)]
            assert await asyncio.to_thread(gated.inside.wait, GUARD_S)
            status, raw = await _post(session, srv.url + "/generate",
                                      {"text": "hello", "sampling_params": {"max_new_tokens": 1}})
            still_held = gated.busy and not any(task.done() for task in held)
            gated.release.set()
            return status, raw, still_held, [(await task)[0] for task in held]

    try:
        status, raw, still_held, held = asyncio.run(run())
    finally:
        gated.release.set()
    assert status == 200 and still_held and held == [200, 200], (status, raw, still_held, held)


def test_a_body_of_too_many_values_is_a_400_before_decoding(served):
    srv, _ = served
    body = b'{"text": "hi", "x": [' + b"{}," * MAX_VALUES + b'{}]}'
    assert len(body) < BODY_LIMIT

    async def run():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as session:
            return await _post(session, srv.url + "/generate", data=body,
                               headers={"Content-Type": "application/json"})

    status, raw = asyncio.run(run())
    assert status == 400 and json.loads(raw)["error"]["code"] == "json_too_many_values", raw


@pytest.mark.unit
def test_value_count_bounds_the_values_outside_strings():
    assert value_count(b'{"a": [1, 2, 3], "b": "x,y,[{"}') == 6  # object, list, 3 numbers, 1 string
    assert value_count(b"[[],{}]") == 5  # 3 values: empty containers count twice
    assert value_count(b'"\\\\", "\\",",') == 3  # an escaped backslash, then an escaped quote
    parse_json_body(b'{"a": [1, 2, 3]}', 8, 5)
    with pytest.raises(APIError) as info:
        parse_json_body(b'{"a": [1, 2, 3, 4, 5]}', 8, 5)
    assert info.value.status == 400 and "max_json_values (5)" in str(info.value)


def _vm_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(field)


def test_gzip_bomb_gets_413_and_memory_stays_flat(served):
    srv, _ = served
    bomb = gzip.compress(b'{"text": "' + b"a" * (512 << 20), compresslevel=9)  # 512 MiB once inflated
    assert len(bomb) < BODY_LIMIT
    with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to the current RSS
        f.write("5")
    base = _vm_kib("VmRSS")

    async def run():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as session:
            return await _post(session, srv.url + "/generate", data=bomb,
                               headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})

    status, raw = asyncio.run(run())
    grown_mib = (_vm_kib("VmHWM") - base) / 1024
    assert status == 413 and json.loads(raw)["error"]["code"] == "request_too_large", raw
    assert grown_mib < 64, grown_mib  # the server (this process) never held the inflated body


@pytest.mark.parametrize("encoding,pack", [("gzip", gzip.compress), ("deflate", zlib.compress)])
def test_compressed_bodies_still_work(served, encoding, pack):
    srv, _ = served
    body = pack(json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 1}}).encode())

    async def run():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as session:
            return await _post(session, srv.url + "/generate", data=body,
                               headers={"Content-Encoding": encoding, "Content-Type": "application/json"})

    status, raw = asyncio.run(run())
    assert status == 200 and "text" in json.loads(raw), raw


def test_decompress_body_stops_at_the_limit():
    bomb = gzip.compress(b"\0" * (64 << 20))
    with pytest.raises(APIError) as info:
        decompress_body(bomb, "gzip", 1 << 20)
    assert info.value.status == 413
    assert decompress_body(gzip.compress(b"x" * 100), "gzip", 100) == b"x" * 100
    with pytest.raises(APIError) as info:
        decompress_body(b"x", "br", 100)
    assert info.value.status == 415
