"""Shutdown within the grace (issue 47, item 9): requests still running when ``graceful_shutdown_s``
ends are cut, and every one of them is answered: a non-streamed request gets a 503 with an
OpenAI-shaped body, a stream ends with an error event and ``data: [DONE]``; then the server exits."""

from __future__ import annotations

import asyncio
import json
import threading

import aiohttp
import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import CUT_MARGIN_S, BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

GRACE_S = 1.0
HANG_GUARD_S = 60.0  # a guard against a hung test, not a timing assertion


class StuckEngine:
    """The real engine's facts, but every request runs until it is aborted (then it ends as 'abort')."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self.gates: dict[str, asyncio.Event] = {}
        self.started = threading.Semaphore(0)
        self.aborted: list[str] = []

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def abort(self, rid: str) -> None:
        self.aborted.append(rid)
        if rid in self.gates:
            self.gates[rid].set()

    async def async_generate(self, rid: str, stream: bool = False, **kwargs):
        gate = self.gates[rid] = asyncio.Event()
        self.started.release()
        end = {"text": "", "output_ids": [], "meta_info": {"id": rid, "prompt_tokens": 2, "completion_tokens": 3,
                                                            "finish_reason": {"type": "abort"}}}
        if not stream:
            await gate.wait()
            return end

        async def chunks():
            yield {"text": "a", "output_ids": [5], "meta_info": {"id": rid, "completion_tokens": 1,
                                                                 "finish_reason": None}}
            await gate.wait()
            yield end
        return chunks()


@pytest.fixture
def stuck():
    engine = Engine(max_total_tokens=2048, context_length=256)
    yield StuckEngine(engine)
    engine.shutdown()


async def _post(session, url, body):
    async with session.post(url, json=body) as resp:
        return resp.status, await resp.read()


def test_cut_requests_are_answered_and_the_server_exits(stuck, caplog):
    caplog.set_level("INFO", logger="radixlm.server.requests")
    srv = BackgroundServer(stuck, ServerConfig(port=0, graceful_shutdown_s=GRACE_S)).start()
    bodies = [("/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 8}}),
              ("/generate", {"text": "hello", "stream": True, "sampling_params": {"max_new_tokens": 8}}),
              ("/v1/completions", {"prompt": "hello", "stream": True, "max_tokens": 8}),
              ("/v1/completions", {"prompt": "hello", "max_tokens": 8})]

    async def run():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_GUARD_S)) as session:
            tasks = [asyncio.ensure_future(_post(session, srv.url + path, body)) for path, body in bodies]
            for _ in bodies:  # every request is inside the engine
                assert await asyncio.to_thread(stuck.started.acquire, True, HANG_GUARD_S)
            stopper = asyncio.ensure_future(asyncio.to_thread(srv.stop, GRACE_S + CUT_MARGIN_S + HANG_GUARD_S))
            results = await asyncio.gather(*tasks, return_exceptions=True)
            await stopper
            return results

    results = asyncio.run(run())
    assert not srv._thread.is_alive()  # the server exited
    assert len(stuck.aborted) == len(bodies)  # every engine request was cut
    for (path, body), result in zip(bodies, results):
        assert not isinstance(result, BaseException), (path, result)  # every request got an answer
        status, raw = result
        if body.get("stream"):
            assert status == 200
            events = [e for e in raw.decode().split("\n\n") if e]
            assert events[-1] == "data: [DONE]", events
            err = json.loads(events[-2].removeprefix("data: "))["error"]
            assert err["code"] == "shutting_down" and set(err) == {"message", "type", "param", "code"}
        else:
            assert status == 503, raw
            err = json.loads(raw)["error"]
            assert err["code"] == "shutting_down" and set(err) == {"message", "type", "param", "code"}
    # the request log counts what each cut request produced (3 tokens each), not 0
    lines = [r.getMessage() for r in caplog.records if r.name == "radixlm.server.requests"]
    assert len(lines) == len(bodies), lines
    for line in lines:
        assert "status=" in line and "prompt_tokens=2 " in line and "completion_tokens=3 " in line, line


def test_health_answers_503_while_draining(stuck):
    """During the grace the port stays open: ``/health`` and every new request get a 503
    ``shutting_down`` (a load balancer's signal), while the running request goes on until cut."""
    srv = BackgroundServer(stuck, ServerConfig(port=0, graceful_shutdown_s=HANG_GUARD_S)).start()

    async def run():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_GUARD_S)) as session:
            running = asyncio.ensure_future(_post(session, srv.url + "/generate", {"text": "hello"}))
            assert await asyncio.to_thread(stuck.started.acquire, True, HANG_GUARD_S)
            async with session.get(srv.url + "/health") as resp:
                before = resp.status
            srv.stop(0)  # begin the shutdown (returns at once)
            for _ in range(1000):  # until the server has begun draining
                async with session.get(srv.url + "/health") as resp:
                    during, body = resp.status, await resp.json()
                if during != 200:
                    break
                await asyncio.sleep(0.01)
            async with session.post(srv.url + "/v1/completions", json={"prompt": "hi"}) as resp:
                new_request = resp.status
            stuck.abort(next(iter(stuck.gates)))  # the running request ends: the drain completes
            return before, during, body, new_request, await running

    before, during, body, new_request, (status, _) = asyncio.run(run())
    srv.stop(HANG_GUARD_S)
    assert (before, during, new_request) == (200, 503, 503) and body["error"]["code"] == "shutting_down", body
    assert status == 200 and not srv._thread.is_alive()
