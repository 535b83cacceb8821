"""``sgl.separate_reasoning``, ``gen(ebnf=...)`` and ``RuntimeEndpoint`` streaming over both
``/generate`` stream layouts (cumulative, SGLang's default; incremental), on the engine and over HTTP.

Random weights: a regex forces the think tags into the output, so the split is checked exactly.
"""

from __future__ import annotations

import re

import pytest
from radixlm.lang import ir

import radixlm as sgl

THINK = r"<think>[a-z]{3}</think>[a-z]{2}"


@pytest.fixture(scope="module")
def engine(tiny_llama):
    from radixlm.runtime.engine.engine import Engine

    eng = Engine(model_path=tiny_llama, max_total_tokens=16384, random_seed=0)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def incremental_engine(tiny_llama):
    from radixlm.runtime.engine.engine import Engine

    eng = Engine(model_path=tiny_llama, max_total_tokens=8192, random_seed=0, incremental_streaming_output=True)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def servers(engine, incremental_engine):
    from radixlm.runtime.server.app import BackgroundServer

    with BackgroundServer(engine) as cumulative, BackgroundServer(incremental_engine) as incremental:
        yield {"cumulative": cumulative, "incremental": incremental}


@pytest.fixture(params=["engine", "cumulative", "incremental"])
def backend(request, engine, servers):
    return engine if request.param == "engine" else sgl.RuntimeEndpoint(servers[request.param].url)


@sgl.function
def thinker(s):
    s += "Q: ponder.\n"
    s += sgl.assistant(sgl.separate_reasoning(sgl.gen("answer", regex=THINK, max_tokens=30), model_type="qwen3"))
    s += "\nEnd."


def test_separate_reasoning_splits_the_gen(backend):
    for stream in (False, True):
        state = thinker.run(backend=backend, temperature=0.0, stream=stream)
        if stream:
            assert "".join(state.text_iter()).endswith("\nEnd.")
        thought, answer = state["answer_reasoning_content"], state["answer"]
        assert re.fullmatch("[a-z]{3}", thought) and re.fullmatch("[a-z]{2}", answer), (thought, answer)
        text = state.text()
        assert "<think>" not in text and thought not in text and answer in text and text.endswith("\nEnd.")
        assert state.messages()[-1] == {"role": "assistant", "content": answer}


def test_separate_reasoning_checks_its_arguments():
    with pytest.raises(ValueError, match="name"):
        sgl.separate_reasoning(sgl.gen(max_tokens=3), model_type="qwen3")
    with pytest.raises(ValueError, match="reasoning_parser must be one of"):
        sgl.separate_reasoning(sgl.gen("x"), model_type="nope")
    with pytest.raises(ValueError, match="model_type"):
        sgl.separate_reasoning(sgl.gen("x"))
    exprs = sgl.separate_reasoning(sgl.user(sgl.gen("x") + sgl.select("y", ["a", "b"])), model_type="deepseek-r1")
    assert [e.reasoning for e in exprs.items if isinstance(e, (ir.Gen, ir.Select))] == ["deepseek-r1"] * 2


@sgl.function
def grammar(s):
    s += "Direction:" + sgl.gen("d", ebnf='root ::= "north" | "south" | "east"', max_tokens=6) + "\n"
    s += "Count:" + sgl.gen("c", ebnf='root ::= [0-9] [0-9]', max_tokens=6)


def test_gen_ebnf_constrains_on_every_backend(backend):
    assert sgl.gen("d", ebnf="root ::= \"a\"").params["ebnf"] == "root ::= \"a\""
    state = grammar.run(backend=backend, temperature=0.0)
    assert state["d"] in ("north", "south", "east") and re.fullmatch("[0-9]{2}", state["c"]), state.text()


@sgl.function
def story(s):
    s += "Once upon a time" + sgl.gen("rest", max_tokens=12, return_logprob=True)


def test_runtime_endpoint_streams_deltas_from_either_layout(engine, servers):
    want = story.run(backend=engine, temperature=0.0)
    for name in ("cumulative", "incremental"):
        state = story.run(backend=sgl.RuntimeEndpoint(servers[name].url), temperature=0.0, stream=True)
        pieces = list(state.text_iter("rest"))
        assert "".join(pieces) == want["rest"] and state["rest"] == want["rest"], name
        meta = state.get_meta_info("rest")
        assert len(meta["output_token_logprobs"]) == len(want.get_meta_info("rest")["output_token_logprobs"])
