"""``constraint_violations`` on OpenAI choices (issue 17): a lenient ``response_format``
(``json_schema.strict: false``) reports what the output violates, on the choice (non-streamed) or on
its finishing chunk (streamed); a strict or absent constraint never carries the field."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

MSG = [{"role": "user", "content": "A number, please."}]
# every integer is a multiple of 1: the relaxed `not` (strict mode rejects it) is always violated
ALWAYS_VIOLATED = {"type": "integer", "minimum": 0, "not": {"multipleOf": 1}}  # unbounded: relaxed, not enumerated
SATISFIABLE = {"type": "integer", "minimum": 0, "maximum": 999}


@pytest.fixture(scope="module")
def server():
    with Engine(max_total_tokens=4096, random_seed=1) as engine, BackgroundServer(engine, ServerConfig(port=0)) as srv:
        yield srv


def _fmt(schema: dict, strict: bool | None) -> dict:
    js: dict = {"name": "n", "schema": schema}
    if strict is not None:
        js["strict"] = strict
    return {"type": "json_schema", "json_schema": js}


async def _post(url: str, body: dict) -> tuple[int, object]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        if not body.get("stream") or resp.status != 200:
            return resp.status, await resp.json()
        lines = [line.decode().strip() async for line in resp.content]
        return resp.status, [json.loads(x[6:]) for x in lines if x.startswith("data: {")]


def chat(srv, **body) -> tuple[int, object]:
    full = {"messages": MSG, "max_tokens": 12, "temperature": 0, **body}
    return asyncio.run(_post(srv.url + "/v1/chat/completions", full))


def test_lenient_violation_is_reported_on_each_choice(server):
    status, out = chat(server, response_format=_fmt(ALWAYS_VIOLATED, False), n=2)
    assert status == 200, out
    for choice in out["choices"]:
        json.loads(choice["message"]["content"])  # still the schema's shape: an integer
        assert int(choice["message"]["content"]) % 1 == 0
        violations = choice["constraint_violations"]
        assert len(violations) == 1 and "should not be valid" in violations[0], violations
    status, out = chat(server, response_format=_fmt(ALWAYS_VIOLATED, True))
    assert status == 400 and out["error"]["param"] == "response_format.json_schema.schema", out


def test_lenient_valid_output_reports_an_empty_list(server):
    status, out = chat(server, response_format=_fmt(SATISFIABLE, False))
    assert status == 200, out
    choice = out["choices"][0]
    assert 0 <= json.loads(choice["message"]["content"]) <= 999
    assert choice["constraint_violations"] == []


@pytest.mark.parametrize("body", [{"response_format": _fmt(SATISFIABLE, True)},
                                  {"response_format": _fmt(SATISFIABLE, None)}, {}])
def test_strict_or_no_constraint_has_no_field(server, body):
    status, out = chat(server, **body)
    assert status == 200, out
    assert "constraint_violations" not in out["choices"][0]


def test_streamed_report_rides_on_the_finishing_chunk(server):
    for schema, expect_violated in ((ALWAYS_VIOLATED, True), (SATISFIABLE, False)):
        status, chunks = chat(server, response_format=_fmt(schema, False), stream=True, n=2)
        assert status == 200, chunks
        for index in (0, 1):
            mine = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["index"] == index]
            finishing = [c for c in mine if c["finish_reason"] is not None]
            assert len(finishing) == 1 and finishing[0] is mine[-1], mine
            assert all("constraint_violations" not in c for c in mine[:-1])
            assert bool(finishing[0]["constraint_violations"]) == expect_violated, finishing
    status, chunks = chat(server, response_format=_fmt(SATISFIABLE, True), stream=True)
    assert status == 200 and not any("constraint_violations" in c["choices"][0] for c in chunks if c["choices"])
