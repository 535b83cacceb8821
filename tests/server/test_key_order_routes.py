"""``json_key_order`` through the server: ``/generate`` (``sampling_params``), ``/v1/completions`` and
``/v1/chat/completions`` (``response_format`` json_schema; the field at the top level or through
the SDK's ``extra_body``). The default writes the members in schema order on every seed; ``"any"``
lets the tiny model's random weights write other orders (or extra members) on some seed; a bad
value is a 400 naming the field."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
import requests

SCHEMA = {"type": "object", "properties": {"b": {"type": "boolean"}, "a": {"type": "boolean"}},
          "required": ["b", "a"]}
SEEDS = range(8)
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _generate(server, seed: int, order: str | None) -> str:
    params = {"temperature": 1.0, "seed": seed, "max_new_tokens": MAX_TOKENS, "json_schema": SCHEMA}
    if order is not None:
        params["json_key_order"] = order
    r = requests.post(server.url + "/generate", json={"text": "JSON:", "sampling_params": params}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["text"]


def _completion(server, seed: int, order: str | None) -> str:
    body = {"model": "default", "prompt": "JSON:", "temperature": 1.0, "seed": seed, "max_tokens": MAX_TOKENS,
            "json_schema": SCHEMA}
    if order is not None:
        body["json_key_order"] = order
    r = requests.post(server.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def _chat(client, seed: int, order: str | None) -> str:
    extra = {"json_key_order": order} if order is not None else None
    reply = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "JSON please"}], temperature=1.0, seed=seed,
        max_tokens=MAX_TOKENS, extra_body=extra,
        response_format={"type": "json_schema", "json_schema": {"name": "ab", "schema": SCHEMA}})
    return reply.choices[0].message.content


ROUTES = ["generate", "completions", "chat"]


def _run(route: str, server, client, seed: int, order: str | None) -> str:
    if route == "chat":
        return _chat(client, seed, order)
    return (_generate if route == "generate" else _completion)(server, seed, order)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("order", [None, "schema"], ids=["default", "schema"])
def test_schema_order_on_every_seed(server, client, route, order):
    for seed in SEEDS:
        value = json.loads(_run(route, server, client, seed, order))
        assert list(value) == ["b", "a"], value


@pytest.mark.parametrize("route", ROUTES)
def test_any_order_writes_other_layouts(server, client, route):
    values = [json.loads(_run(route, server, client, seed, "any")) for seed in SEEDS]
    for value in values:
        jsonschema.validate(value, SCHEMA)
    assert any(list(v) != ["b", "a"] for v in values), values


@pytest.mark.parametrize("route", ROUTES)
def test_a_bad_key_order_is_a_400_naming_it(server, route):
    if route == "generate":
        body = {"text": "x", "sampling_params": {"json_schema": SCHEMA, "json_key_order": "sorted"}}
        path = "/generate"
    elif route == "completions":
        body = {"model": "default", "prompt": "x", "json_schema": SCHEMA, "json_key_order": "sorted"}
        path = "/v1/completions"
    else:
        body = {"model": "default", "messages": [{"role": "user", "content": "x"}], "json_key_order": 3,
                "response_format": {"type": "json_schema", "json_schema": {"name": "ab", "schema": SCHEMA}}}
        path = "/v1/chat/completions"
    r = requests.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    # the field as the body spelt it: sampling_params.json_key_order on /generate
    assert "json_key_order" in error["message"] and error.get("param", "").endswith("json_key_order"), error
