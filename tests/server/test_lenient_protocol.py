"""Protocol leniency (issue 17): SGLang/vLLM extension fields honoured, unknown fields ignored and
named (or a 400 with ``strict_api``), and the SGLang-native routes' shapes, against live servers."""

from __future__ import annotations

import asyncio
import json
import logging
import re

import aiohttp
import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.body import IGNORED_HEADER
from radixlm.runtime.server.transport.state import ServerConfig

MSG = [{"role": "user", "content": "Pick one."}]
GREEDY = {"temperature": 0.0, "max_new_tokens": 6}


@pytest.fixture(scope="module")
def lenient():
    engine = Engine(max_total_tokens=8192, random_seed=0)
    with BackgroundServer(engine, ServerConfig(port=0)) as srv:
        yield srv
    engine.shutdown()


@pytest.fixture(scope="module")
def strict():
    """strict_api and incremental_streaming_output: the two switches back to the old behaviour."""
    engine = Engine(max_total_tokens=8192, random_seed=0, strict_api=True, incremental_streaming_output=True)
    with BackgroundServer(engine, ServerConfig(port=0)) as srv:
        yield srv
    engine.shutdown()


async def _request(url: str, method: str, body: object) -> tuple[int, object, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, json=body) as resp:
            text = await resp.text()
            data = json.loads(text) if "json" in resp.headers.get("Content-Type", "") else text
            return resp.status, data, dict(resp.headers)


def call(srv, path, body=None, method=None):
    return asyncio.run(_request(srv.url + path, method or ("GET" if body is None else "POST"), body))


def sse(srv, path, body) -> tuple[list[dict], dict]:
    async def run():
        async with aiohttp.ClientSession() as session, session.post(srv.url + path, json=body) as resp:
            assert resp.status == 200, await resp.text()
            lines = [line.decode().strip() async for line in resp.content]
            return [json.loads(x[6:]) for x in lines if x.startswith("data: {")], dict(resp.headers)
    return asyncio.run(run())


def chat(srv, **body):
    return call(srv, "/v1/chat/completions", {"messages": MSG, "max_tokens": 8, "temperature": 0, **body})


def content(out) -> str:
    return out["choices"][0]["message"]["content"]


def test_unknown_fields_are_ignored_logged_and_named(lenient, caplog):
    messages = [{"role": "user", "content": "Hi", "function_call": None, "foo": 1},
                {"role": "assistant", "content": "Hello", "reasoning_content": "greet", "function_call": None},
                {"role": "user", "content": "Again"}]
    with caplog.at_level(logging.WARNING, logger="radixlm.server"):
        status, out, headers = chat(lenient, messages=messages, bogus=True, guided_decoding_backend="x",
                                    chat_template_kwargs={"enable_thinking": False}, separate_reasoning=False,
                                    stream_options=None, return_hidden_states=False)
    assert status == 200 and content(out) is not None
    assert headers[IGNORED_HEADER] == "messages[0].foo,bogus,return_hidden_states"
    assert [r.getMessage() for r in caplog.records if "ignored unknown" in r.getMessage()] == [
        "/v1/chat/completions: ignored unknown field(s) messages[0].foo, bogus, return_hidden_states"]
    status, _, headers = chat(lenient)
    assert status == 200 and IGNORED_HEADER not in headers  # nothing ignored: no header
    events, headers = sse(lenient, "/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True, "zzz": 1})
    assert events and headers[IGNORED_HEADER] == "zzz"


def test_strict_api_rejects_what_lenient_ignores(strict):
    for body, param in (({"bogus": 1}, "bogus"),
                        ({"messages": [{"role": "user", "content": "x", "foo": 1}]}, "messages[0].foo"),
                        ({"structured_outputs": {"regex": "a", "other": 1}}, "structured_outputs.other"),
                        ({"response_format": {"type": "json_object", "x": 1}}, "response_format.x")):
        status, out, _ = chat(strict, **body)
        assert status == 400 and out["error"]["param"] == param and out["error"]["code"] == "unknown_field", out
    status, out, _ = call(strict, "/generate", {"text": "x", "sampling_params": {"foo": 1}})
    assert status == 400 and out["error"]["param"] == "sampling_params.foo"
    status, _, _ = chat(strict, messages=[{"role": "assistant", "content": "x", "function_call": None,
                                           "reasoning_content": "y"}, *MSG])
    assert status == 200  # keys other clients send in messages are known, even when strict


@pytest.mark.parametrize("body, param", [
    ({"temperature": "hot"}, "temperature"), ({"top_p": 3}, "top_p"), ({"guided_regex": 5}, "guided_regex"),
    ({"structured_outputs": {"regex": 3}}, "structured_outputs.regex"), ({"guided_choice": [1]}, "guided_choice"),
    ({"guided_json": "{not json"}, "guided_json"), ({"regex": "a", "guided_json": {}}, "guided_json"),
    ({"ebnf": " "}, "ebnf"), ({"rid": 7}, "rid"), ({"continue_final_message": True}, "continue_final_message"),
    ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "guided_regex"),
    ({"chat_template_kwargs": "x"}, "chat_template_kwargs"), ({"separate_reasoning": "no"}, "separate_reasoning"),
])
def test_known_fields_with_bad_values_stay_400s(lenient, body, param):
    status, out, _ = chat(lenient, **body)
    assert status == 400 and out["error"]["param"] == param, out


def test_extension_constraints_are_honoured(lenient):
    assert re.fullmatch(r"[0-9]{3}", content(chat(lenient, guided_regex="[0-9]{3}")[1]))
    assert content(chat(lenient, guided_choice=["yes", "no"])[1]) in ("yes", "no")
    assert content(chat(lenient, structured_outputs={"choice": ["red", "blue"]})[1]) in ("red", "blue")
    assert content(chat(lenient, ebnf='root ::= "up" | "down"')[1]) in ("up", "down")
    assert content(chat(lenient, guided_grammar='root ::= "left" | "right"')[1]) in ("left", "right")
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["a"], "additionalProperties": False}
    for field in ({"guided_json": schema}, {"json_schema": json.dumps(schema)},
                  {"structured_outputs": {"json": schema}}):
        out = content(chat(lenient, max_tokens=40, **field)[1])
        assert isinstance(json.loads(out)["a"], int), (field, out)
    status, out, _ = call(lenient, "/v1/completions", {"prompt": "n:", "regex": "[a-c]{4}", "max_tokens": 8})
    assert status == 200 and re.fullmatch("[a-c]{4}", out["choices"][0]["text"])


def test_response_format_strict_false_is_the_lenient_mode(lenient):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "not": {"multipleOf": 3}}},
              "required": ["n"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}
    status, out, _ = chat(lenient, response_format=fmt, max_tokens=30)
    assert status == 400 and out["error"]["param"] == "response_format.json_schema.schema", out
    fmt["json_schema"]["strict"] = False
    status, out, _ = chat(lenient, response_format=fmt, max_tokens=30)
    assert status == 200, out
    assert out["choices"][0]["message"]["content"] is not None


def test_continue_final_message_continues_the_assistant_text(lenient):
    msgs = [*MSG, {"role": "assistant", "content": "I choose the"}]
    status, out, _ = chat(lenient, messages=msgs, continue_final_message=True, add_generation_prompt=False)
    assert status == 200, out
    tok = lenient.engine.tokenizer
    full = tok.apply_chat_template(msgs, add_generation_prompt=False)
    cut = full[:full.rindex("I choose the") + len("I choose the")]
    assert cut != full and out["usage"]["prompt_tokens"] == len(tok.encode(cut, add_special_tokens=False))


def test_rid_names_the_request_and_abort_of_an_unknown_rid_fails(lenient):
    status, out, _ = call(lenient, "/abort_request", {"rid": "nobody-has-this"})
    assert status == 200 and out["success"] is False and "nobody-has-this" in out["message"]

    async def run():
        async with aiohttp.ClientSession() as session:
            body = {"prompt": "long", "max_tokens": 3000, "ignore_eos": True, "stream": True, "rid": "mine", "n": 2}
            async with session.post(lenient.url + "/v1/completions", json=body) as resp:
                await resp.content.readline()
                async with session.post(lenient.url + "/abort_request", json={"rid": "mine"}) as r:
                    aborted = await r.json()
                rest = [line async for line in resp.content]
        return aborted, rest
    aborted, rest = asyncio.run(run())
    assert aborted["success"] is True and aborted["aborted"] == 2  # the rid covers both choices
    assert b"data: [DONE]\n" in rest


def test_generate_takes_sglangs_fields_and_per_item_lists(lenient):
    sp = {**GREEDY, "stop_regex": None, "json_schema": None, "regex": None, "n": 1, "custom_params": None}
    status, out, headers = call(lenient, "/generate", {"text": "a", "sampling_params": sp, "image_data": None})
    assert status == 200 and IGNORED_HEADER not in headers  # nulls are absent, as SGLang's client sends them
    seeded = {"temperature": 1.0, "max_new_tokens": 8}
    by_sglang = call(lenient, "/generate", {"text": "seed", "sampling_params": {**seeded, "sampling_seed": 7}})[1]
    by_ours = call(lenient, "/generate", {"text": "seed", "sampling_params": {**seeded, "seed": 7}})[1]
    assert by_sglang["output_ids"] == by_ours["output_ids"]
    status, out, headers = call(lenient, "/generate", {"text": "a", "sampling_params": {**GREEDY, "zz": 1},
                                                       "lora_path": "x"})
    assert status == 200 and headers[IGNORED_HEADER] == "sampling_params.zz,lora_path"
    body = {"text": ["one", "two"], "rid": ["r-a", "r-b"], "return_logprob": [True, False],
            "sampling_params": [{**GREEDY, "max_new_tokens": 2}, {**GREEDY, "max_new_tokens": 5,
                                                                  "ebnf": 'root ::= "ab" "ab"*'}]}
    status, out, _ = call(lenient, "/generate", body)
    assert status == 200 and [o["meta_info"]["id"] for o in out] == ["r-a", "r-b"]
    assert [o["meta_info"]["completion_tokens"] for o in out][0] == 2
    assert "output_token_logprobs" in out[0]["meta_info"] and "output_token_logprobs" not in out[1]["meta_info"]
    assert re.fullmatch("(ab)+", out[1]["text"]), out[1]["text"]
    status, out, _ = call(lenient, "/generate", {**body, "return_logprob": [True]})
    assert status == 400 and out["error"]["param"] == "return_logprob"


def test_generate_streams_cumulative_text_unless_incremental(lenient, strict):
    body = {"text": "The tide", "stream": True, "return_logprob": True,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": 10}}
    full = call(lenient, "/generate", {**body, "stream": False})[1]
    # the same prompt again: the radix tree drafts the answer it cached, so a chunk may carry several tokens
    chunks, _ = sse(lenient, "/generate", body)
    assert len(chunks) >= 2 and chunks[-1]["text"] == full["text"] and chunks[-1]["output_ids"] == full["output_ids"]
    assert all(b["text"].startswith(a["text"]) for a, b in zip(chunks, chunks[1:]))
    assert len(chunks[-1]["meta_info"]["output_token_logprobs"]) == 10  # the lists so far, too
    deltas, _ = sse(strict, "/generate", body)
    assert "".join(c["text"] for c in deltas) == full["text"]
    assert sum(len(c["meta_info"]["output_token_logprobs"]) for c in deltas) == 10


def test_native_info_load_cache_and_token_routes(lenient):
    status, info, _ = call(lenient, "/get_server_info")
    assert status == 200 and info["schedule_policy"] == "lpm" and info["version"] and info["port"] == lenient.port
    assert isinstance(info["internal_states"], list) and "num_running_reqs" in info["internal_states"][0]
    assert info["strict_api"] is False and info["incremental_streaming_output"] is False
    assert call(lenient, "/server_info")[1]["version"] == info["version"]
    status, load, _ = call(lenient, "/get_load")
    assert status == 200 and set(load[0]) == {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}
    assert call(lenient, "/flush_cache", method="GET")[0] == 405 and call(lenient, "/flush_cache", {})[0] == 200
    tok = lenient.engine.tokenizer
    status, out, _ = call(lenient, "/tokenize", {"prompt": "hello world"})
    assert status == 200 and out["tokens"] == tok.encode("hello world", add_special_tokens=True)
    assert out["count"] == len(out["tokens"]) and out["max_model_len"] == lenient.engine.model_config.context_len
    out = call(lenient, "/v1/tokenize", {"prompt": ["a", "b c"], "add_special_tokens": False})[1]
    assert out["tokens"] == [tok.encode("a"), tok.encode("b c")] and out["count"] == [len(t) for t in out["tokens"]]
    out = call(lenient, "/tokenize", {"messages": MSG})[1]
    assert out["tokens"] == tok.encode(tok.apply_chat_template(MSG), add_special_tokens=False)
    ids = tok.encode("round trip")
    assert call(lenient, "/detokenize", {"tokens": ids})[1] == {"text": "round trip"}
    assert call(lenient, "/detokenize", {"tokens": [ids, ids[:1]]})[1]["text"][0] == "round trip"
    status, out, _ = call(lenient, "/detokenize", {"tokens": [10**9]})
    assert status == 400 and out["error"]["param"] == "tokens"
