"""The model's sampling defaults apply on every route: with ``top_k: 1`` in its generation_config.json a
request that sets no sampler field is greedy, on /generate, OpenAI, Anthropic, Ollama and the DSL."""

from __future__ import annotations

import json
import shutil

import pytest
import requests
from radixlm.lang.backends import EngineBackend
from radixlm.runtime.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

from radixlm import function, gen

N = 12
PROMPT = "Once upon a time"
MSGS = [{"role": "user", "content": PROMPT}]
# route, body without sampler fields, the same body asking for greedy decoding, where the text is
ROUTES = [
    ("/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": N}},
     {"text": PROMPT, "sampling_params": {"max_new_tokens": N, "temperature": 0}}, lambda r: r["text"]),
    ("/v1/completions", {"prompt": PROMPT, "max_tokens": N}, {"prompt": PROMPT, "max_tokens": N, "temperature": 0},
     lambda r: r["choices"][0]["text"]),
    ("/v1/chat/completions", {"messages": MSGS, "max_tokens": N},
     {"messages": MSGS, "max_tokens": N, "temperature": 0}, lambda r: r["choices"][0]["message"]["content"]),
    ("/v1/messages", {"model": "model", "messages": MSGS, "max_tokens": N},
     {"model": "model", "messages": MSGS, "max_tokens": N, "temperature": 0}, lambda r: r["content"][0]["text"]),
    ("/api/generate", {"model": "model", "prompt": PROMPT, "stream": False, "options": {"num_predict": N}},
     {"model": "model", "prompt": PROMPT, "stream": False, "options": {"num_predict": N, "temperature": 0}},
     lambda r: r["response"]),
]


@pytest.fixture(scope="module")
def engine(tiny_llama, tmp_path_factory):
    model = tmp_path_factory.mktemp("greedy") / "model"
    shutil.copytree(tiny_llama, model)
    config = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**config, "temperature": 0.9, "top_k": 1}))
    with Engine(str(model), max_total_tokens=2048, grammar_warmup=False) as e:
        yield e


@pytest.fixture(scope="module")
def server(engine):
    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize(("route", "plain", "greedy", "text"), ROUTES, ids=[r[0] for r in ROUTES])
def test_route_without_sampler_fields_uses_the_models_defaults(server, route, plain, greedy, text):
    want = requests.post(server.url + route, json=greedy, timeout=120)
    assert want.status_code == 200, want.text
    for seed in (1, 2):  # top_k 1 from the model: greedy whatever the sampler's seed
        body = {**plain, "seed": seed} if route.startswith("/v1/c") else plain
        got = requests.post(server.url + route, json=body, timeout=120)
        assert got.status_code == 200, got.text
        assert text(got.json()) == text(want.json()), route


def test_dsl_program_without_sampler_fields_uses_the_models_defaults(engine):
    @function
    def story(s):
        s += PROMPT
        s += gen("rest", max_tokens=N)

    backend = EngineBackend(engine)
    greedy = story.run(backend=backend, temperature=0)["rest"]
    assert story.run(backend=backend)["rest"] == greedy


def test_responses_echo_the_sampling_in_effect(server):
    """A Responses object reports the temperature and top_p that generated it: the model's
    defaults when the request sets none, the request's own otherwise."""
    body = {"model": "model", "input": PROMPT, "max_output_tokens": 4}
    got = requests.post(server.url + "/v1/responses", json=body, timeout=120)
    assert got.status_code == 200, got.text
    assert (got.json()["temperature"], got.json()["top_p"]) == (0.9, 1.0)
    got = requests.post(server.url + "/v1/responses", json={**body, "temperature": 0.2, "top_p": 0.5}, timeout=120)
    assert (got.json()["temperature"], got.json()["top_p"]) == (0.2, 0.5)
