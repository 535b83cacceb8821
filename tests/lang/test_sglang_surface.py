"""SGLang frontend features beyond the core DSL, on the tiny checkpoint: fork item assignment,
``concate_and_append``, streamed meta info, SGLang's regex constants, ``n`` / ``stop_regex`` /
``choices_method=None``, generator-style batches, ``flush_cache`` / ``get_server_info``, and the
``OpenAI`` backend against our own server's ``/v1`` routes.

Each feature runs on the in-process engine and on ``RuntimeEndpoint`` over a live server. Random
weights: the tests assert structure and constraints, never content.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import types

import openai
import pytest
from radixlm.lang import ir

import radixlm as sgl


@pytest.fixture(scope="module")
def engine(tiny_llama):
    from radixlm.runtime.engine.engine import Engine

    eng = Engine(model_path=tiny_llama, max_total_tokens=32768, random_seed=0)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def server(engine):
    from radixlm.runtime.server.app import BackgroundServer

    with BackgroundServer(engine) as srv:
        yield srv


@pytest.fixture(params=["engine", "http"])
def backend(request, engine, server):
    return engine if request.param == "engine" else sgl.RuntimeEndpoint(server.url)


@pytest.fixture(scope="module")
def model_name(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused").models.list().data[0].id


# ---- 1. forks[i] += ..., forks += lambda / list -----------------------------------------------
@sgl.function
def fork_program(s):
    s += "Topic: tea.\n"
    forks = s.fork(3)
    for i in range(3):
        forks[i] += f"Idea {i}:" + sgl.gen("idea", max_tokens=3)
    forks += lambda i: f"\nScore {i}:" + sgl.gen("score", max_tokens=2)
    forks += [" a", " b", " c"]
    forks.join()


def test_fork_item_assignment_lambda_and_list(backend):
    s = fork_program.run(backend=backend, temperature=0)
    assert len(s["idea"]) == 3 and all(isinstance(v, str) for v in s["idea"])
    assert len(s["score"]) == 3 and s.text() == "Topic: tea.\n"
    program = fork_program.trace()
    fork = next(n for n in program.nodes if isinstance(n, ir.Fork))
    for i, branch in enumerate(fork.branches):
        texts = [n.value for n in branch if isinstance(n, ir.Text)]
        assert texts == [f"Idea {i}:", f"\nScore {i}:", " " + "abc"[i]]
        assert [n.name for n in branch if isinstance(n, ir.Gen)] == ["idea", "score"]
    forks = s.fork(2)
    with pytest.raises(TypeError, match=r"forks\[0\] \+= expr"):  # replacing a child is refused
        forks[0] = s


# ---- 2. join("concate_and_append") ------------------------------------------------------------
@sgl.function
def concat_program(s):
    s += "Q: list two words.\n"
    forks = s.fork(2)
    forks += lambda i: f"- word {i}:" + sgl.gen("w", max_tokens=3, stop="\n") + "\n"
    forks.join("concate_and_append")
    s += "Done."


def test_join_concate_and_append_appends_the_children_texts(backend):
    s = concat_program.run(backend=backend, temperature=0)
    assert "w" not in s  # SGLang's concatenation joins text, not variables
    text = s.text()
    assert text.startswith("Q: list two words.\n- word 0:") and text.endswith("Done.")
    assert text.index("- word 0:") < text.index("- word 1:")
    program = concat_program.trace()
    assert "join (concate_and_append)" in str(program)
    with pytest.raises(ValueError, match="concate_and_append"):
        sgl.function(lambda s: s.fork(2).join("concat")).trace()


# ---- 3. text_async_iter(return_meta_data=True) with logprobs -----------------------------------
@sgl.function
def stream_program(s):
    s += "Once upon a time" + sgl.gen("story", max_tokens=6, return_logprob=True)


def test_async_iter_meta_data_carries_each_chunks_logprobs(backend):
    s = stream_program.run(backend=backend, stream=True, temperature=0)

    async def collect(var):
        return [item async for item in s.text_async_iter(var, return_meta_data=True)]

    items = asyncio.run(collect("story"))
    assert "".join(piece for piece, _ in items) == s["story"]
    lps = [lp for _, meta in items for lp in meta["output_token_logprobs"]]
    assert len(lps) == s.get_meta_info("story")["completion_tokens"] == 6
    assert all(isinstance(lp[2], str) for lp in lps)  # with their token texts
    assert all(len(meta["output_token_logprobs"]) >= 1 for piece, meta in items if piece)
    assert items[-1][1]["finish_reason"]["type"] == "length"
    assert s.get_meta_info("story")["output_token_logprobs"] == lps  # the whole gen's, merged
    whole = asyncio.run(collect(None))  # the program is done: one piece, every chunk's meta merged
    assert "".join(piece for piece, _ in whole) == s.text()
    assert [lp for _, meta in whole if meta for lp in meta["output_token_logprobs"]] == lps


# ---- 4. SGLang's regex constants ---------------------------------------------------------------
def test_sglang_regex_constants_have_sglang_values_and_constrain_gen(backend):
    assert ir.REGEX_INT == r"[-+]?[0-9]+[ \n]*"
    assert ir.REGEX_FLOAT == r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
    assert ir.REGEX_BOOL == r"(True|False)"
    assert ir.REGEX_STR == r"\"[\w\d\s]*\""

    @sgl.function
    def typed(s):
        s += "n = " + sgl.gen("i", max_tokens=6, regex=ir.REGEX_INT) + "\n"
        s += "x = " + sgl.gen("f", max_tokens=6, regex=ir.REGEX_FLOAT) + "\n"
        s += "ok = " + sgl.gen("b", max_tokens=3, regex=ir.REGEX_BOOL) + "\n"
        s += "s = " + sgl.gen("s", max_tokens=6, regex=ir.REGEX_STR)

    s = typed.run(backend=backend, temperature=0)
    assert re.fullmatch(ir.REGEX_INT, s["i"]) and re.fullmatch(ir.REGEX_BOOL, s["b"])
    assert re.fullmatch(r"[-+]?[0-9]*\.?[0-9]*[ \n]*", s["f"])  # a prefix of REGEX_FLOAT (length cap)
    assert re.fullmatch(r"\"[\w\d\s]*\"?", s["s"])  # REGEX_STR, possibly cut at max_tokens


# ---- 5. n, stop_regex, choices_method=None, SGLang's signatures --------------------------------
def test_n_stop_regex_and_default_choices_method(backend):
    @sgl.function
    def prog(s):
        s += "Say:" + sgl.gen("many", max_tokens=4, n=3, temperature=1.0) + "\n"
        s += "Shout:" + sgl.gen("loud", max_tokens=12, stop_regex=[r"[a-z]"]) + "\n"
        s += "Pick:" + sgl.gen("pick", choices=["yes", "no"], choices_method=None)
        s += sgl.select("pick2", ["up", "down"], choices_method=None)

    s = prog.run(backend=backend, temperature=0)
    assert isinstance(s["many"], list) and len(s["many"]) == 3
    assert len(s.get_meta_info("many")) == 3 and s.text().startswith("Say:" + s["many"][0] + "\n")
    assert re.search(r"[a-z]", s["loud"]) is None  # cut at the first lowercase letter
    assert s["pick"] in ("yes", "no") and s["pick2"] in ("up", "down")
    assert s.get_meta_info("pick")["method"] == "token_length_normalized"


SGL_GEN = ["name", "max_tokens", "min_tokens", "n", "stop", "stop_token_ids", "stop_regex", "temperature",
           "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "ignore_eos",
           "return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs", "dtype",
           "choices", "choices_method", "regex", "json_schema"]
SGL_GEN_TYPED = [p for p in SGL_GEN[:18] if p != "min_tokens"]


def test_gen_and_select_take_sglangs_arguments_in_sglangs_order(engine):
    assert list(inspect.signature(sgl.gen).parameters) == SGL_GEN + ["ebnf", "budget_aware_completion", "json_key_order"]  # ours, kw-only
    assert list(inspect.signature(sgl.gen_int).parameters) == SGL_GEN_TYPED
    assert list(inspect.signature(sgl.gen_string).parameters) == SGL_GEN_TYPED
    assert list(inspect.signature(sgl.select).parameters) == ["name", "choices", "temperature",
                                                              "choices_method"]
    assert sgl.gen_int("x", 4, 2).params["n"] == 2  # positional, as in SGLang
    with pytest.warns(UserWarning, match="only dtype"):
        assert sgl.gen("x", dtype=int, regex="a+").params["regex"] != "a+"
    with pytest.raises(ValueError, match="stop_regex"):
        sgl.gen("x", stop_regex="(")
    with pytest.raises(ValueError, match="n must"):
        sgl.gen("x", n=0)

    @sgl.function
    def prog(s):
        s += "Hi" + sgl.gen("a", max_tokens=2, return_logprob=True, return_text_in_logprobs=False)

    meta = prog.run(backend=engine).get_meta_info("a")
    assert [lp[2] for lp in meta["output_token_logprobs"]] == [None, None]


def test_run_keywords_use_thread_copy_and_fork_offsets(engine):
    @sgl.function
    def prog(s):
        s += "A" + sgl.gen("x", max_tokens=2)
        with s.copy() as c:
            c += "B" + sgl.gen("y", max_tokens=2)

    s = prog.run(backend=engine, use_thread=False, n=2)
    assert len(s["x"]) == 2 and len(s["y"]) == 1 and len(s["y"][0]) == 2  # run(n=2): every gen
    with pytest.raises(ValueError, match="position_ids_offset"):
        sgl.function(lambda s: s.fork(2, position_ids_offset=[0, 1])).run(backend=engine)


# ---- 6. run_batch(generator_style=True, num_threads, progress_bar) -------------------------------
@sgl.function
def batch_program(s, city, n_words=2):
    s += "City: " + city + "\nFacts:" + sgl.gen("facts", max_tokens=n_words)


def test_run_batch_generator_style_yields_states_in_order(backend, capsys):
    args = [{"city": c} for c in ["Paris", "Rome", "Oslo", "Lima", "Kyiv"]]
    gen = batch_program.run_batch(args, generator_style=True, num_threads=2, progress_bar=True,
                                  backend=backend, temperature=0)
    assert isinstance(gen, types.GeneratorType)
    states = list(gen)
    assert [st.text().split("\n")[0] for st in states] == [f"City: {a['city']}" for a in args]
    assert "5/5" in capsys.readouterr().err
    lists = batch_program.run_batch([["Bern", 1], ("Quito",)], num_threads=1, backend=backend)
    assert [st.text().split("\n")[0] for st in lists] == ["City: Bern", "City: Quito"]
    assert lists[0].get_meta_info("facts")["completion_tokens"] <= 1  # n_words=1, positionally
    with pytest.raises(TypeError, match="positional values"):
        batch_program.run_batch([["a", 1, 2]], backend=backend)


# ---- 7. flush_cache, get_server_info, the OpenAI backend ------------------------------------------
def test_module_level_flush_cache_and_server_info(backend):
    assert sgl.flush_cache() is False and sgl.get_server_info() is None  # no default backend
    sgl.set_default_backend(backend)
    try:
        assert sgl.flush_cache() is True
        info = sgl.get_server_info()
        assert "max_total_tokens" in info["server_args"] and "cache_hit_rate" in info["stats"]
    finally:
        sgl.set_default_backend(None)


@sgl.function
def chat_program(s):
    s += sgl.system("Be brief.")
    s += sgl.user("Hi")
    s += sgl.assistant(sgl.gen("first", max_tokens=4))
    s += sgl.user("Again")
    s += sgl.assistant(sgl.gen("second", max_tokens=3, n=2))


def test_openai_backend_chat_roles_streaming_and_limits(server, model_name):
    oa = sgl.OpenAI(model_name, base_url=server.url + "/v1", api_key="unused")
    s = chat_program.run(backend=oa, temperature=0)
    assert [m["role"] for m in s.messages()] == ["system", "user", "assistant", "user", "assistant"]
    assert s.messages()[2]["content"] == s["first"] and len(s["second"]) == 2
    assert s.get_meta_info("first")["completion_tokens"] <= 4 and oa.token_usage.prompt_tokens > 0
    streamed = chat_program.run(backend=oa, stream=True, temperature=0)
    pieces = list(streamed.text_iter("first"))
    assert "".join(pieces) == streamed["first"] and len(streamed["second"]) == 2
    assert sgl.flush_cache(oa) is False and sgl.get_server_info(oa)["model_name"] == model_name

    @sgl.function
    def after_user(s, expr):
        s += sgl.user("q")
        s += expr

    for bad, error in [(sgl.gen("x", max_tokens=2), RuntimeError),  # not right after assistant
                       (sgl.select("x", ["a", "b"]), NotImplementedError),  # chat models cannot
                       (sgl.assistant(sgl.gen("x", regex="[0-9]+")), ValueError),
                       (sgl.assistant(sgl.gen("x", return_logprob=True)), ValueError),
                       (sgl.assistant(sgl.gen_int("x")), ValueError)]:
        st = after_user.run(expr=bad, backend=oa)
        assert isinstance(st.error(), error), (bad, st.error())


def test_openai_backend_completion_model_select_and_string(server, model_name):
    oc = sgl.OpenAI(model_name, is_chat_model=False, base_url=server.url + "/v1", api_key="unused")

    @sgl.function
    def prog(s):
        s += "Fruit: " + sgl.select("fruit", ["apple", "banana split", "kiwi"]) + "\n"
        s += "Odd: " + sgl.select("odd", ["x", "yy"], choices_method=sgl.unconditional_likelihood_normalized)
        s += "\nName: " + sgl.gen_string("name", max_tokens=5) + "\nMore:" + sgl.gen("more", max_tokens=3)

    s = prog.run(backend=oc, temperature=0)
    assert s.error() is None and s["fruit"] in ("apple", "banana split", "kiwi") and s["odd"] in ("x", "yy")
    assert len(s.get_meta_info("fruit")["scores"]) == 3
    assert s["name"].startswith('"') and s["name"].endswith('"') and s["name"].count('"') == 2
    assert s.text().startswith(f"Fruit: {s['fruit']}\nOdd: {s['odd']}\nName: {s['name']}\nMore:")


def test_public_names_are_exported():
    from radixlm.lang import api

    for name in ("OpenAI", "flush_cache", "get_server_info", "video", "RuntimeEndpoint"):
        assert getattr(sgl, name) is getattr(api, name)
    with pytest.raises(ValueError, match="video"):
        sgl.video("clip.mp4", 4)
