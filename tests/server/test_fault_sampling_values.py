"""Fault: sampler values that overflow float32 (a huge ``logit_bias``, ``repetition_penalty`` or
``top_k``, NaN) are 400s naming the field; a tiny ``temperature`` is greedy, not token 0 repeated;
``seed`` INT64_MAX with ``n`` 2 is accepted (the per-choice seeds wrap, never quoted back)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.sampling_params import SEED_RANGE, SamplingParams, choice_seed
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

GUARD_S = 120  # a hang guard only
INT64_MAX = 2**63 - 1
MSG = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def server(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=4096) as engine, \
            BackgroundServer(engine, ServerConfig(port=0)) as srv:
        yield srv


def call(srv, path: str, body: dict) -> tuple[int, dict]:
    # allow_nan: the body carries NaN as Python's json writes it (JavaScript clients can too)
    req = urllib.request.Request(srv.url + path, data=json.dumps(body, allow_nan=True).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=GUARD_S) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


BAD_VALUES = {
    "logit_bias": {"5": 1e308}, "logit_bias ": {"5": float("nan")}, "repetition_penalty": 1e308,
    "top_k": 10**30, "top_k ": 100_000,  # the tiny model's vocabulary is 8,192 tokens
}


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
@pytest.mark.parametrize("route", ["/generate", "/v1/completions"])
def test_overflowing_sampler_values_are_400s_naming_the_field(server, route, name):
    field = name.strip()
    value = BAD_VALUES[name]
    if route == "/generate":
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 2, field: value}}
    else:
        body = {"prompt": "hi", "max_tokens": 2, field: value}
    status, out = call(server, route, body)
    assert status == 400, out
    assert out["error"]["param"].endswith(field) and field in out["error"]["message"], out


def test_a_tiny_temperature_is_greedy(server):
    def text(temperature: float) -> str:
        status, out = call(server, "/generate", {"text": "Once upon a time", "sampling_params": {
            "max_new_tokens": 8, "temperature": temperature}})
        assert status == 200, out
        return out["text"]
    greedy = text(0.0)
    assert text(1e-300) == greedy and text(1e-7) == greedy


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": "hi", "max_tokens": 3}),
    ("/v1/chat/completions", {"messages": MSG, "max_tokens": 3}),
])
@pytest.mark.parametrize("seed", [INT64_MAX, SEED_RANGE[0]])
def test_an_extreme_seed_with_n_choices_is_accepted(server, path, body, seed):
    status, out = call(server, path, {**body, "seed": seed, "n": 2})
    assert status == 200, out
    assert len(out["choices"]) == 2
    again = call(server, path, {**body, "seed": seed, "n": 2})[1]
    assert [c.get("text", c.get("message")) for c in again["choices"]] == \
        [c.get("text", c.get("message")) for c in out["choices"]]


def test_choice_seeds_stay_in_range_and_keep_small_seeds():
    assert choice_seed(7, 3) == 10
    assert choice_seed(INT64_MAX, 1) == SEED_RANGE[0]
    for j in range(4):
        SamplingParams(seed=choice_seed(INT64_MAX, j))  # valid: no error quotes an internal seed
    assert len({choice_seed(INT64_MAX, j) for j in range(64)}) == 64
