"""Large inputs never stall the event loop (issue 47, item 3): a prompt too long to fit is a 400
before any tokenizing (a cheap check on its characters), tokenizing and template rendering run off
the event loop (``/health`` answers while one is in progress), and a compressed body is bounded
while it is inflated (a gzip bomb gets 413 without the process's memory growing)."""

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
from radixlm.runtime.server.http_errors import APIError
from radixlm.runtime.server.json_body import decompress_body
from radixlm.runtime.server.state import ServerConfig

GUARD_S = 120.0  # hang guards only
MARKER = "SLOW-TOKENIZE"
BIG = 200_000  # characters: far more than a 256-token context can hold
BODY_LIMIT = 1 << 20
PROBES = 5


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
    engine = Engine(max_total_tokens=2048, context_length=256)
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
])
def test_prompt_too_long_to_fit_is_rejected_before_tokenizing(served, path, body, param):
    srv, gated = served
    before = gated.big_encodes

    async def run():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GUARD_S)) as session:
            return await _post(session, srv.url + path, body)

    status, raw = asyncio.run(run())
    err = json.loads(raw)["error"]
    assert status == 400 and err["param"] == param and err["code"] == "context_length_exceeded", raw
    assert gated.big_encodes == before  # never tokenized


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
