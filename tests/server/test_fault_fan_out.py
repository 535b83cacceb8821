"""Fan-out limits hold once per HTTP request, whatever the route splits it into (issue 47, item 2):
prompts x n of the whole request are counted before any engine call, a request that can never fit
the waiting queue is a 400 naming the field, and the queue is bounded by default."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig
from radixlm.runtime.server_args import ServerArgs

MAX_PROMPTS, MAX_SEQS, MAX_QUEUED = 4, 8, 6
SP = {"max_new_tokens": 1}


class CountingEngine:
    """The real engine, counting the engine calls (and sequences) the server makes."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._engine, name)

    async def async_generate(self, **kwargs):
        self.calls += 1
        return await self._engine.async_generate(**kwargs)


@pytest.fixture(scope="module")
def served():
    engine = Engine(max_total_tokens=4096, context_length=256, max_running_requests=2,
                    max_prompts_per_request=MAX_PROMPTS, max_sequences_per_request=MAX_SEQS,
                    max_queued_requests=MAX_QUEUED)
    counting = CountingEngine(engine)
    srv = BackgroundServer(counting, ServerConfig(port=0)).start()
    yield srv, counting
    srv.stop()
    engine.shutdown()


def post(srv, path, body):
    async def run():
        async with aiohttp.ClientSession() as session:
            async with session.post(srv.url + path, json=body) as resp:
                return resp.status, json.loads(await resp.text())
    return asyncio.run(asyncio.wait_for(run(), 120))


@pytest.mark.parametrize("path,body,param", [
    ("/generate", {"text": ["p"] * (MAX_PROMPTS + 1), "sampling_params": SP}, "text"),
    ("/generate", {"input_ids": [[1, 2]] * (MAX_PROMPTS + 1), "sampling_params": SP}, "input_ids"),
    ("/generate", {"text": ["p"] * 3, "sampling_params": {**SP, "n": 3}}, "sampling_params.n"),
    ("/v1/completions", {"prompt": ["p"] * (MAX_PROMPTS + 1), "max_tokens": 1}, "prompt"),
    ("/v1/completions", {"prompt": ["p"] * 3, "n": 3, "max_tokens": 1}, "n"),
])
def test_fan_out_counted_once_per_http_request(served, path, body, param):
    srv, counting = served
    before = counting.calls
    status, out = post(srv, path, body)
    assert status == 400, out
    assert out["error"]["param"] == param, out
    assert counting.calls == before  # rejected before any engine call


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": "p", "n": MAX_QUEUED + 1, "max_tokens": 1}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": MAX_QUEUED + 1,
                              "max_tokens": 1}),
])
def test_request_that_can_never_fit_the_queue_is_a_400(served, path, body):
    srv, counting = served
    before = counting.calls
    status, out = post(srv, path, body)
    assert status == 400 and out["error"]["param"] == "n", out
    assert "max_queued_requests" in out["error"]["message"]
    assert counting.calls == before


def test_limits_still_admit_what_fits(served):
    srv, _ = served
    status, out = post(srv, "/v1/completions", {"prompt": ["a", "b"], "n": 3, "max_tokens": 1})
    assert status == 200 and len(out["choices"]) == 6, out


def test_engine_rejects_a_call_larger_than_the_queue_as_bad_input(served):
    srv, counting = served
    with pytest.raises(ValueError, match="max_queued_requests") as info:
        counting._engine.generate("p", {"max_new_tokens": 1, "n": MAX_QUEUED + 1})
    assert getattr(info.value, "field", None) == "n"


def test_queue_bounded_by_default():
    assert ServerArgs().max_queued_requests is None
    assert ServerArgs().queue_limit == max(4 * ServerArgs().max_running_requests,
                                           ServerArgs().max_sequences_per_request)
    assert ServerArgs(max_running_requests=512).queue_limit == 2048
    assert ServerArgs(max_queued_requests=3).queue_limit == 3
