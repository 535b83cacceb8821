"""The DSL end to end on the tiny checkpoint, in-process and over HTTP.

Random weights: the tests assert structure and constraints (stop strings, regexes, schemas,
message layout, cache reuse), never content.
"""

from __future__ import annotations

import asyncio
import json
import re

import jsonschema
import pytest
from pydantic import BaseModel, Field
from radixlm.lang.backends import as_backend

import radixlm as sgl

IPV4 = r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"


@pytest.fixture(scope="module")
def engine(tiny_llama):
    from radixlm.runtime.engine.engine import Engine

    eng = Engine(model_path=tiny_llama, max_total_tokens=32768, random_seed=0)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def endpoint(engine):
    from radixlm.runtime.server.app import BackgroundServer

    with BackgroundServer(engine) as server:
        yield sgl.RuntimeEndpoint(server.url)


@sgl.function
def few_shot_qa(s, question):
    s += "Answer each question in one line.\n"
    s += "Q: What is the capital of France?\nA: Paris\n"
    s += "Q: How many legs does a spider have?\nA: Eight\n"
    s += "Q: " + question + "\nA:" + sgl.gen("answer", max_tokens=12, stop="\n")


def test_few_shot_qa_stops_at_newline(engine):
    s = few_shot_qa.run(question="What colour is the sky?", backend=engine, temperature=0)
    answer = s["answer"]
    assert isinstance(answer, str) and "\n" not in answer
    assert s.text().endswith("\nA:" + answer)
    assert s.get_meta_info("answer")["completion_tokens"] <= 12


@sgl.function
def two_turns(s):
    s += sgl.system("You are terse.")
    s += sgl.user("Hello")
    s += sgl.assistant(sgl.gen("first", max_tokens=6))
    with s.user():
        s += "And again"
    s += sgl.assistant_begin() + sgl.gen("second", max_tokens=6) + sgl.assistant_end()


def test_multi_turn_roles_follow_the_chat_template(engine):
    s = two_turns.run(backend=engine, temperature=0)
    messages = s.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[2]["content"] == s["first"] and messages[4]["content"] == s["second"]
    # the prompt up to the first gen is exactly what the model's template renders
    rendered = engine.tokenizer.apply_chat_template(messages[:2], add_generation_prompt=True)
    assert s.text().startswith(rendered)


@pytest.mark.parametrize("method", [sgl.token_length_normalized, sgl.greedy_token_selection,
                                    sgl.unconditional_likelihood_normalized])
def test_select_returns_a_choice_with_per_choice_scores(engine, method):
    choices = ["sunny", "rainy", "a thunderstorm"]

    @sgl.function
    def weather(s):
        s += "Tomorrow the weather will be " + sgl.select("w", choices, choices_method=method)

    s = weather.run(backend=engine)
    assert s["w"] in choices and s.text().endswith(s["w"])
    meta = s.get_meta_info("w")
    assert len(meta["normalized_prompt_logprobs"]) == 3 and len(meta["scores"]) == 3
    for entries in meta["input_token_logprobs"]:
        assert entries and all(e[0] is not None and e[0] <= 0 for e in entries)
    if method is sgl.token_length_normalized:
        best = max(range(3), key=lambda i: meta["normalized_prompt_logprobs"][i])
        assert s["w"] == choices[best]


def test_typed_gens_parse(engine):
    @sgl.function
    def typed(s):
        s += "An integer: " + sgl.gen_int("i", max_tokens=12) + "\n"
        s += "A float: " + sgl.gen("f", max_tokens=20, dtype=float) + "\n"
        s += "A boolean: " + sgl.gen("b", max_tokens=6, dtype=bool) + "\n"
        s += "An address: " + sgl.gen("ip", max_tokens=20, regex=IPV4)

    s = typed.run(backend=engine, temperature=0.8)
    int(s["i"])
    float(s["f"])
    assert s["b"] in ("True", "False")
    assert re.fullmatch(IPV4, s["ip"])


class Person(BaseModel):
    name: str = Field(max_length=8)
    age: int = Field(ge=0, le=120)


def test_json_schema_output_validates(engine):
    schema = Person.model_json_schema()

    @sgl.function
    def extract(s):
        s += "Person: " + sgl.gen("p", max_tokens=48, json_schema=Person) + "\n"
        s += "Again: " + sgl.gen("q", max_tokens=48, json_schema=json.dumps(schema))

    s = extract.run(backend=engine, temperature=0.7)
    for name in ("p", "q"):
        jsonschema.validate(json.loads(s[name]), schema)


def test_var_scope_mid_program_reads_and_host_eval(engine):
    @sgl.function
    def router(s, question):
        s += "Question: " + question + "\nExpert: " + sgl.select("expert", ["math", "history"]) + "\n"
        if s["expert"] == "math":  # host-side branching on a generated value
            s += "Use arithmetic.\n"
        else:
            s += "Use dates.\n"
        with s.var_scope("work"):
            s += "a = " + sgl.gen_int("a", max_tokens=4) + "\nb = " + sgl.gen_int("b", max_tokens=4) + "\n"
        total = eval(s["a"] + "+" + s["b"])  # a host-side tool call between gens
        s += f"a + b = {total}\nSo: " + sgl.gen("final", max_tokens=4)

    s = router.run(question="What is 2 + 3?", backend=engine, temperature=0)
    assert s["expert"] in ("math", "history")
    assert s["work"] == f"a = {s['a']}\nb = {s['b']}\n"
    assert f"a + b = {int(s['a']) + int(s['b'])}\nSo: " in s.text()


def test_fork_join_children_reuse_the_prefix(engine):
    @sgl.function
    def tree(s):
        s += "Think about the problem step by step. " * 8
        forks = s.fork(5)
        forks += lambda i: f"Path {i}: " + sgl.gen("step", max_tokens=6)
        forks.join()
        s += "Best: " + sgl.gen("best", max_tokens=4)

    s = tree.run(backend=engine, temperature=0.8)
    assert isinstance(s["step"], list) and len(s["step"]) == 5
    metas = s.get_meta_info("step")
    assert all(m["cached_tokens"] > 0 for m in metas)
    assert s.text().count("Path ") == 0 and "Best: " in s.text()


def test_streaming_text_iter_concatenates_to_text(engine):
    s = few_shot_qa.run(question="Why?", backend=engine, temperature=0, stream=True)
    pieces = list(s.text_iter())
    assert "".join(pieces) == s.text()
    s2 = few_shot_qa.run(question="Why?", backend=engine, temperature=0, stream=True)

    async def collect():
        return [c async for c in s2.text_async_iter("answer")]

    assert "".join(asyncio.run(collect())) == s2["answer"] == s["answer"]


def test_run_batch_of_64_with_progress_bar(engine, capsys):
    @sgl.function
    def agent(s, task):
        s += sgl.system("You are a tool-using agent. Tools: search(query), calc(expr). " * 4)
        s += sgl.user("Task: " + task)
        s += sgl.assistant(sgl.gen("action", max_tokens=4))

    states = agent.run_batch([{"task": f"job {i}"} for i in range(64)], backend=engine,
                             temperature=0, progress_bar=True)
    assert len(states) == 64 and all(isinstance(st["action"], str) for st in states)
    assert all(st.get_meta_info("action")["cached_tokens"] > 0 for st in states)
    assert "64/64" in capsys.readouterr().err


UNSUPPORTED_SCHEMA = {"type": "array", "uniqueItems": True, "minItems": 2,  # strict mode rejects it
                      "items": {"type": "object"}}


def test_gen_errors_surface_with_the_engine_message(engine):
    @sgl.function
    def bad(s):
        s += "Data: " + sgl.gen("x", max_tokens=8, json_schema=UNSUPPORTED_SCHEMA)
        s += sgl.gen("y", max_tokens=2)

    s = bad.run(backend=engine)
    assert s.error() is not None and "uniqueItems" in str(s.error())
    with pytest.raises(Exception, match="uniqueItems"):
        s["x"]
    with pytest.raises(KeyError, match="missing_var"):
        s["missing_var"]


@sgl.function
def mixed(s, topic):
    s += sgl.system("You write short notes.")
    s += sgl.user("Topic: " + topic)
    s += sgl.assistant(sgl.gen("note", max_tokens=8) + " Mood: " + sgl.select("mood", ["calm", "busy"]))
    forks = s.fork(2)
    forks += lambda i: f" Option {i}:" + sgl.gen("opt", max_tokens=4)
    forks.join()


def test_http_and_in_process_backends_agree_under_greedy(engine, endpoint):
    a = mixed.run(topic="rivers", backend=engine, temperature=0)
    b = mixed.run(topic="rivers", backend=endpoint, temperature=0)
    assert a.error() is None and b.error() is None
    assert a.text() == b.text()
    assert (a["note"], a["mood"], a["opt"]) == (b["note"], b["mood"], b["opt"])
    assert a.messages() == b.messages()


def test_http_backend_streams_and_reports_errors(endpoint):
    s = few_shot_qa.run(question="Where?", backend=endpoint, temperature=0, stream=True)
    assert "".join(s.text_iter()) == s.text()

    @sgl.function
    def bad(s):
        s += "Data: " + sgl.gen("x", max_tokens=8, json_schema=UNSUPPORTED_SCHEMA)

    s = bad.run(backend=endpoint)
    with pytest.raises(ValueError, match="uniqueItems"):
        s["x"]


def test_trace_prints_the_ir_and_finds_the_prefix(engine):
    program = mixed.trace()
    text = str(program)
    assert text.splitlines()[0] == "program mixed(topic)"
    for line in ("role_begin system", "arg topic", "gen note(max_new_tokens=8)", "select mood",
                 "fork 2", "join (gather_variable)"):
        assert line in text
    template = as_backend(engine).role_template
    prefix = mixed.shared_prefix([{"topic": "rivers"}, {"topic": "roads"}], template)
    assert prefix.endswith("Topic: r") and "You write short notes." in prefix


def test_http_backend_reuses_its_connections(engine):
    """Kept-alive connections serve a sequence of requests; run_batch's threads share a bounded pool."""
    from radixlm.lang.backends import POOL_SIZE
    from radixlm.runtime.server.app import BackgroundServer

    with BackgroundServer(engine) as server:
        endpoint = sgl.RuntimeEndpoint(server.url)
        for topic in ("rivers", "roads", "rails"):
            assert mixed.run(topic=topic, backend=endpoint, temperature=0).error() is None
        pools = endpoint.session.get_adapter(server.url).poolmanager.pools
        assert len(pools) == 1
        pool = pools[next(iter(pools.keys()))]
        # `mixed` forks 2 branches: two requests may be in flight at once, never one connection each
        assert pool.num_connections <= 2 and pool.num_requests >= 4 * pool.num_connections
        states = mixed.run_batch([{"topic": t} for t in ("a", "b", "c", "d")], backend=endpoint,
                                 num_threads=4, temperature=0)
        assert all(s.error() is None for s in states)
        assert 1 <= pool.num_connections <= min(POOL_SIZE, 4 * 2)  # 4 programs x 2 forks at most
        endpoint.close()
