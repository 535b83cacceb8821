"""What real clients send and read, against a live server: Ollama's any-type JSON bodies, durations,
``/api/ps``, ``/api/show`` and fill-in-the-middle; Anthropic's ``output_config.format`` and every
``thinking`` form; OpenAI's ``allowed_tools`` and legacy ``functions``; unknown keys at any depth
ignored and named; every error in the shape of the route's protocol; embeddings through the
openai, ollama and (when installed) LangChain clients."""

from __future__ import annotations

import json
import os
import shutil

import anthropic
import numpy as np
import ollama
import openai
import pytest
import requests
from pydantic import BaseModel
from radixlm.runtime.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.body import IGNORED_HEADER
from radixlm.runtime.server.transport.state import ServerConfig
from radixlm.runtime.testing.real_shapes import rename_added_tokens

HI = [{"role": "user", "content": "hi"}]
FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")


def fn(name: str, props: dict | None = None) -> dict:
    params = {"type": "object", "properties": props or {"x": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": list(props or {"x": 0}), "additionalProperties": False}
    return {"name": name, "description": name, "parameters": params}


TOOLS = [{"type": "function", "function": fn(n)} for n in ("alpha", "beta", "gamma")]


def post(server, path: str, body: dict | str, **headers: str) -> requests.Response:
    data = body if isinstance(body, str) else json.dumps(body)
    return requests.post(server.url + path, data=data, headers={"Content-Type": "application/json", **headers},
                         timeout=60)


@pytest.fixture(scope="module")
def keyed(server):
    """A second server over the same engine, with an API key."""
    srv = BackgroundServer(server.engine, ServerConfig(port=0, api_key="secret-key")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def fim_server(tiny_llama, tmp_path_factory):
    """The tiny model with three reserved tokens renamed to Qwen2.5-Coder's fill-in-the-middle markers."""
    path = tmp_path_factory.mktemp("fim") / "llama-fim"
    shutil.copytree(tiny_llama, path, ignore=shutil.ignore_patterns("model.safetensors"))
    os.symlink(os.path.join(tiny_llama, "model.safetensors"), path / "model.safetensors")
    spec = json.loads((path / "tokenizer.json").read_text())
    config = json.loads((path / "tokenizer_config.json").read_text())
    reserved = [t["id"] for t in spec["added_tokens"] if t["content"].startswith("<|reserved_special_token_")]
    rename_added_tokens(spec, config, {tid: (marker, False) for tid, marker in zip(reserved, FIM)})
    (path / "tokenizer.json").write_text(json.dumps(spec))
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    engine = Engine(str(path), max_total_tokens=4096, random_seed=0)
    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    yield srv
    srv.stop()
    engine.shutdown()


# ---------------------------------------------------------------------------------------------- Ollama


def test_ollama_reads_json_whatever_the_content_type_but_refuses_other_origins(server):
    body = {"model": "default", "messages": HI, "stream": False, "options": {"num_predict": 3}}
    for ctype in ("application/x-www-form-urlencoded", "text/plain"):
        r = post(server, "/api/chat", body, **{"Content-Type": ctype})
        assert r.status_code == 200 and r.json()["done"], r.text
    r = post(server, "/api/chat", body, **{"Content-Type": "text/plain", "Origin": "http://evil.example"})
    assert r.status_code == 403 and isinstance(r.json()["error"], str)
    assert post(server, "/v1/chat/completions", {"messages": HI}, **{"Content-Type": "text/plain"}).status_code == 415


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_reports_its_durations_in_nanoseconds(server, stream):
    client = ollama.Client(host=server.url, timeout=60)
    out = client.chat(model="default", messages=HI, options={"num_predict": 6, "temperature": 0}, stream=stream)
    last = list(out)[-1] if stream else out
    assert last.done and last.eval_count >= 1
    parts = (last.load_duration, last.prompt_eval_duration, last.eval_duration)
    assert all(isinstance(d, int) and d >= 0 for d in parts) and last.prompt_eval_duration > 0
    assert last.total_duration >= sum(parts)


def test_ps_and_show_describe_the_served_model(server):
    client = ollama.Client(host=server.url, timeout=60)
    running = client.ps().models
    assert [m.model for m in running] == [server.engine.model_name]
    assert running[0].size > 0 and running[0].context_length > 0 and running[0].expires_at is not None
    shown = client.show(server.engine.model_name)
    assert shown.license == "" and "completion" in shown.capabilities and "insert" not in shown.capabilities
    assert shown.details.family == "llama" and shown.modelinfo["general.architecture"] == "llama"


@pytest.mark.parametrize("path, method, status", [("/api/nope", "POST", 404), ("/api/chat", "GET", 405)])
def test_ollama_transport_errors_have_ollama_shape(server, path, method, status):
    r = requests.request(method, server.url + path, json={}, timeout=30)
    assert r.status_code == status and list(r.json()) == ["error"] and isinstance(r.json()["error"], str)


def test_ollama_401_has_ollama_shape(keyed):
    r = post(keyed, "/api/chat", {"model": "default", "messages": HI})
    assert r.status_code == 401 and list(r.json()) == ["error"]
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=keyed.url, timeout=30).chat(model="default", messages=HI)
    assert e.value.status_code == 401 and "key" in e.value.error.lower()


def test_suffix_without_fill_in_the_middle_tokens_is_a_clear_400(server):
    r = post(server, "/api/generate", {"model": "default", "prompt": "def f(", "suffix": "  return x", "stream": False})
    assert r.status_code == 400 and "<|fim_prefix|>" in r.json()["error"]
    r = post(server, "/v1/completions", {"prompt": "def f(", "suffix": "  return x", "max_tokens": 3})
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix"


def test_fill_in_the_middle_on_generate_and_completions(fim_server):
    prefix, suffix = "def add(a, b):\n", "\n    return c\n"
    expected = len(fim_server.engine.tokenizer.encode(f"{FIM[0]}{prefix}{FIM[1]}{suffix}{FIM[2]}",
                                                      add_special_tokens=True))  # the BOS, as for any prompt
    client = ollama.Client(host=fim_server.url, timeout=60)
    out = client.generate(model="default", prompt=prefix, suffix=suffix, options={"num_predict": 4})
    assert out.done and out.prompt_eval_count == expected
    assert "insert" in client.show(fim_server.engine.model_name).capabilities
    oa = openai.OpenAI(base_url=fim_server.url + "/v1", api_key="unused", max_retries=0)
    done = oa.completions.create(model="default", prompt=prefix, suffix=suffix, max_tokens=4)
    assert done.usage.prompt_tokens == expected and done.choices[0].finish_reason in ("stop", "length")
    r = post(fim_server, "/v1/completions", {"prompt": [1, 2, 3], "suffix": "x", "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix"


# ---------------------------------------------------------------------------------------------- Anthropic


class City(BaseModel):
    name: str
    rank: int


def test_messages_parse_follows_output_config_format(server):
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)
    out = client.messages.parse(model="default", max_tokens=60, messages=[{"role": "user", "content": "a city"}],
                                output_format=City)
    assert isinstance(out.parsed_output, City)
    r = post(server, "/v1/messages", {"model": "default", "max_tokens": 40, "messages": HI,
                                      "output_config": {"format": {"type": "json_schema", "schema": 5}}})
    assert r.status_code == 400 and "output_config.format.schema" in r.json()["error"]["message"]


@pytest.mark.parametrize("thinking", [{"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"},
                                      {"type": "adaptive"}, {"type": "adaptive", "display": "omitted"},
                                      {"type": "between_tools"}])
def test_every_thinking_form_is_accepted(server, thinking):
    r = post(server, "/v1/messages", {"model": "default", "max_tokens": 4, "messages": HI, "thinking": thinking})
    assert r.status_code == 200 and r.json()["type"] == "message", r.text


def test_anthropic_unknown_nested_keys_are_ignored_and_named(server):
    body = {"model": "default", "max_tokens": 4, "cache_control": {"type": "ephemeral"},
            "messages": [{"role": "user", "content": "hi", "id": "msg_1"}],
            "tools": [{"name": "alpha", "input_schema": fn("alpha")["parameters"], "strict": True}]}
    r = post(server, "/v1/messages", body)
    assert r.status_code == 200, r.text
    assert set(r.headers[IGNORED_HEADER].split(",")) == {"cache_control", "messages[0].id", "tools[0].strict"}


@pytest.mark.parametrize("method, path, ctype, status", [
    ("POST", "/v1/messages", "text/plain", 415), ("GET", "/v1/messages", "application/json", 405),
    ("POST", "/v1/messages/nope", "application/json", 404)])
def test_anthropic_transport_errors_have_anthropic_shape(server, method, path, ctype, status):
    r = requests.request(method, server.url + path, data="{}", headers={"Content-Type": ctype}, timeout=30)
    assert r.status_code == status and r.json()["type"] == "error" and r.json()["error"]["message"]


def test_anthropic_401_reaches_the_client_as_an_authentication_error(keyed):
    client = anthropic.Anthropic(base_url=keyed.url, api_key="wrong", max_retries=0, timeout=30)
    with pytest.raises(anthropic.AuthenticationError) as e:
        client.messages.create(model="default", max_tokens=4, messages=HI)
    assert e.value.body["error"]["type"] == "authentication_error"


# ---------------------------------------------------------------------------------------------- OpenAI


@pytest.fixture(scope="module")
def oa(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_allowed_tools_limit_which_tool_is_called(oa):
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "gamma"}}]}}
    for seed in range(3):
        out = oa.chat.completions.create(model="default", messages=HI, tools=TOOLS, tool_choice=choice,
                                         parallel_tool_calls=False, max_tokens=100, seed=seed, temperature=1.0)
        calls = out.choices[0].message.tool_calls
        assert calls and {c.function.name for c in calls} == {"gamma"}


def test_allowed_tools_naming_an_undeclared_tool_is_a_400(server):
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "name": "zeta"}]}}
    r = post(server, "/v1/chat/completions", {"messages": HI, "tools": TOOLS, "tool_choice": choice})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice.allowed_tools.tools[0].name"


def test_legacy_functions_are_tools_answered_as_function_call(oa, server):
    out = oa.chat.completions.create(model="default", messages=HI, functions=[fn("beta")],
                                     function_call={"name": "beta"}, max_tokens=40)
    choice = out.choices[0]
    assert choice.finish_reason == "function_call" and choice.message.tool_calls is None
    assert choice.message.function_call.name == "beta" and "x" in json.loads(choice.message.function_call.arguments)
    both = post(server, "/v1/chat/completions", {"messages": HI, "tools": TOOLS, "functions": [fn("beta")]})
    assert both.status_code == 400 and both.json()["error"]["param"] == "functions"
    for body, param in (({"functions": [{"name": "bad name"}]}, "functions[0].name"),
                        ({"functions": [fn("beta")], "function_call": {"name": "zeta"}}, "function_call.name"),
                        ({"functions": [{"name": "f", "parameters": {"type": "object", "minProperties": "x"}}]},
                         "functions[0].parameters")):
        r = post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 2, **body})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_unknown_nested_keys_are_ignored_and_named_at_any_depth(server):
    tools = [{"type": "function", "function": {**fn("alpha"), "strict": True, "x-extra": 1}, "cache_control": {}}]
    body = {"messages": [{"role": "user", "content": "hi", "id": "m1"}], "tools": tools, "tool_choice": "none",
            "max_tokens": 3, "response_format": {"type": "text", "unknown": 1}}
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    assert set(r.headers[IGNORED_HEADER].split(",")) == {"messages[0].id", "tools[0].cache_control",
                                                         "tools[0].function.x-extra", "response_format.unknown"}


@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", {"messages": HI, "tools": [{"type": "function", "function": {"name": 5}}]},
     "tools[0].function.name"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("/v1/embeddings", {"input": [["a"]]}, "input[0]"),
])
def test_a_wrong_type_on_a_known_nested_field_stays_a_400_naming_it(server, path, body, param):
    r = post(server, path, body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_embeddings_with_the_openai_client(oa, server):
    stats = server.engine.get_stats()
    texts = ["The cat sat on the mat.", "hello", "a much longer sentence about the weather in Paris today"]
    batch = oa.embeddings.create(model="default", input=texts)  # the client asks for base64
    vectors = np.array([d.embedding for d in batch.data])
    hidden = server.engine.model_config.hidden_size
    assert vectors.shape == (3, hidden) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    single = oa.embeddings.create(model="default", input=texts[1], encoding_format="float").data[0].embedding
    assert np.allclose(single, vectors[1], atol=1e-4)
    ids = server.engine.tokenizer.encode(texts[1], add_special_tokens=True)
    by_ids = oa.embeddings.create(model="default", input=[ids]).data[0].embedding
    assert np.allclose(by_ids, vectors[1], atol=1e-4)
    assert batch.usage.prompt_tokens == sum(len(server.engine.tokenizer.encode(t, add_special_tokens=True))
                                            for t in texts)
    short = oa.embeddings.create(model="default", input="hello", dimensions=8).data[0].embedding
    assert len(short) == 8 and np.isclose(np.linalg.norm(short), 1.0, atol=1e-5)
    after = server.engine.get_stats()
    assert after["radix_cache_tokens"] == stats["radix_cache_tokens"]  # the prefix cache is bypassed


def test_embed_with_the_ollama_client_matches_openai(oa, server):
    client = ollama.Client(host=server.url, timeout=60)
    out = client.embed(model="default", input=["hello", "world"])
    assert len(out.embeddings) == 2 and out.prompt_eval_count > 0 and out.total_duration > 0
    same = oa.embeddings.create(model="default", input=["hello", "world"]).data
    assert np.allclose(out.embeddings, [d.embedding for d in same], atol=1e-4)
    assert np.allclose(client.embeddings(model="default", prompt="hello").embedding, out.embeddings[0], atol=1e-4)
    too_long = "word " * 6000
    assert post(server, "/api/embed", {"model": "default", "input": too_long, "truncate": False}).status_code == 400
    assert post(server, "/v1/embeddings", {"input": too_long}).json()["error"]["code"] == "context_length_exceeded"


def test_langchain_openai_embeddings(server):
    langchain_openai = pytest.importorskip("langchain_openai", reason="langchain-openai is not installed")
    emb = langchain_openai.OpenAIEmbeddings(model="default", base_url=server.url + "/v1", api_key="unused",
                                            check_embedding_ctx_length=False)
    docs = emb.embed_documents(["hello", "world"])
    assert len(docs) == 2 and np.allclose(emb.embed_query("hello"), docs[0], atol=1e-4)
