"""Interpreter semantics on a scripted toy backend (no model): ordering, concurrency, errors, forks.

The end-to-end behaviour on the real engine is in test_dsl.py; here each rule of the
interpreter is checked where a failure points at one place.
"""

from __future__ import annotations

import threading
import time

import pytest
from radixlm.lang import ir
from radixlm.lang.chat_template import RoleTemplate
from radixlm.lang.choices import choice_entries

import radixlm as sgl

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward


class ToyBackend:
    """Characters are tokens; a completion is ``<n>`` repeated letters; records every request."""

    role_template = RoleTemplate.chatml()

    def __init__(self, delay_s: float = 0.0, gate: threading.Event | None = None):
        self.requests: list[tuple] = []
        self.delay_s = delay_s
        self.gate = gate  # when given, every completion waits for it
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()

    def _one(self, text, params, logprob):
        if params.get("json_schema") == {"type": "bogus"}:
            raise ValueError("json_schema: unsupported type 'bogus' at #/type")
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        time.sleep(self.delay_s)
        if self.gate is not None and not self.gate.wait(30):
            raise TimeoutError("the gated completion was never released")
        with self.lock:
            self.in_flight -= 1
        n = params.get("max_new_tokens", 128)
        out = "x" * min(n, 3)
        meta = {"prompt_tokens": len(text), "completion_tokens": len(out), "cached_tokens": 0}
        if logprob.get("return_logprob"):
            start = logprob.get("logprob_start_len") or 0
            # a choice scores higher the more 'y' it has
            meta["input_token_logprobs"] = [[None if i == start else (-0.1 if c == "y" else -1.0), ord(c), c]
                                            for i, c in enumerate(text) if i >= start]
        return {"text": out, "output_ids": [], "meta_info": meta}

    def generate(self, text, sampling_params, input_ids=None, **logprob):
        self.requests.append((text, dict(sampling_params), dict(logprob)))
        if isinstance(text, list):
            return [self._one(t, sampling_params, logprob) for t in text]
        return self._one(text, sampling_params, logprob)

    def generate_stream(self, text, sampling_params, **logprob):
        out = self.generate(text, sampling_params, **logprob)
        for ch in out["text"]:
            yield ch, out["meta_info"]


def test_text_gen_roles_and_messages():
    @sgl.function
    def chat(s, q):
        s += sgl.system("be brief")
        s += sgl.user(q)
        s += sgl.assistant(sgl.gen("a", max_tokens=2))

    s = chat.run(q="hi", backend=ToyBackend())
    assert s["a"] == "xx"
    assert s.text() == ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                        "<|im_start|>assistant\nxx<|im_end|>\n")
    assert [m["role"] for m in s.messages()] == ["system", "user", "assistant"]
    assert s.messages()[2]["content"] == "xx"


def test_gens_are_non_blocking_and_reads_wait():
    gate = threading.Event()
    backend = ToyBackend(gate=gate)

    @sgl.function
    def prog(s):
        s += "a" + sgl.gen("x", max_tokens=1)
        s += "b" + sgl.gen("y", max_tokens=1)
        assert not gate.is_set()  # appending returned while the first gen was still held
        gate.set()
        assert s["x"] == "x"

    s = prog.run(backend=backend)
    assert s.text() == "axbx"


def test_unknown_variable_is_a_keyerror_naming_it():
    @sgl.function
    def prog(s):
        s += "a" + sgl.gen("x", max_tokens=1)

    s = prog.run(backend=ToyBackend())
    with pytest.raises(KeyError, match="nope"):
        s["nope"]


def test_gen_error_surfaces_from_variable_and_error():
    @sgl.function
    def prog(s):
        s += "a" + sgl.gen("x", json_schema={"type": "bogus"})
        s += sgl.gen("y", max_tokens=1)

    s = prog.run(backend=ToyBackend())
    assert isinstance(s.error(), ValueError) and "bogus" in str(s.error())
    with pytest.raises(ValueError, match="bogus"):
        s["x"]
    with pytest.raises(ValueError, match="bogus"):
        s["y"]  # later expressions are skipped once the state failed


def test_fork_prefills_once_runs_children_concurrently_and_joins():
    backend = ToyBackend(delay_s=0.1)

    @sgl.function
    def prog(s):
        s += "shared prefix "
        forks = s.fork(4)
        forks += lambda i: f"branch {i}: " + sgl.gen("step", max_tokens=2)
        forks.join()

    s = prog.run(backend=backend)
    assert s["step"] == ["xx"] * 4
    prefills = [r for r in backend.requests if r[1] == {"max_new_tokens": 0}]
    assert [r[0] for r in prefills] == ["shared prefix "]
    assert backend.max_in_flight >= 2
    assert s.text() == "shared prefix "


def test_var_scope_and_setitem():
    @sgl.function
    def prog(s):
        with s.var_scope("block"):
            s += "one " + sgl.gen(max_tokens=1)
        s["host"] = 42

    s = prog.run(backend=ToyBackend())
    assert s["block"] == "one x" and s["host"] == 42 and "host" in s


def test_streaming_text_iter_concatenates_to_text():
    @sgl.function
    def prog(s):
        s += "q:" + sgl.gen("a", max_tokens=3)

    s = prog.run(stream=True, backend=ToyBackend(delay_s=0.05))
    assert "".join(s.text_iter()) == s.text()
    assert "".join(s.text_iter("a")) == s["a"] == "xxx"


def test_select_scores_each_choice():
    backend = ToyBackend()

    @sgl.function
    def prog(s):
        s += "pick: " + sgl.select("c", ["no", "yyy", "maybe"])

    s = prog.run(backend=backend)
    assert s["c"] == "yyy"
    meta = s.get_meta_info("c")
    assert len(meta["normalized_prompt_logprobs"]) == 3
    assert meta["normalized_prompt_logprobs"][1] == pytest.approx(-0.1)


def test_choice_entries_keep_merged_boundary_token():
    # context tokens [..., "a", " "], choice "b": tokenised as [..., "a", " b"]: the merged token counts
    entries = [[None, 1, "a"], [-0.5, 2, " b"]]
    assert choice_entries("xa ", 3, 1, entries) == [[-0.5, 2, " b"]]
    entries = [[None, 1, "a"], [-0.2, 2, " "], [-0.5, 3, "b"]]
    assert choice_entries("xa ", 3, 1, entries) == [[-0.5, 3, "b"]]


def test_trace_ir_and_fstring_error():
    @sgl.function
    def prog(s, question):
        s += sgl.system("You answer questions.")
        s += sgl.user("Q: " + question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=8, stop="\n"))
        forks = s.fork(2)
        forks += sgl.select("ok", ["yes", "no"])
        forks.join()

    program = prog.trace()
    text = str(program)
    assert text.splitlines()[0] == "program prog(question)"
    assert "arg question" in text and "gen answer(max_new_tokens=8, stop='\\n')" in text
    assert "fork 2" in text and "branch 1:" in text and "join" in text
    kinds = [type(n).__name__ for n in program.nodes]
    assert kinds[:4] == ["RoleBegin", "Text", "RoleEnd", "RoleBegin"]
    prefix = program.constant_prefix(RoleTemplate.chatml())
    assert prefix == "<|im_start|>system\nYou answer questions.<|im_end|>\n<|im_start|>user\nQ: "

    @sgl.function
    def bad(s, question):
        s += f"Q: {question}"

    with pytest.raises(TypeError, match="question.*\\+"):
        bad.trace()


def test_run_batch_prefills_the_shared_prefix_once():
    backend = ToyBackend()

    @sgl.function
    def prog(s, sys_prompt, q):
        s += sys_prompt + "\nQ: " + q + "\nA:" + sgl.gen("a", max_tokens=1)

    states = prog.run_batch([{"sys_prompt": "RULES", "q": f"question {i}"} for i in range(8)],
                            backend=backend)
    assert [st["a"] for st in states] == ["x"] * 8
    prefills = [r[0] for r in backend.requests if r[1] == {"max_new_tokens": 0}]
    assert prefills == ["RULES\nQ: question "]


def test_ir_expression_concatenation():
    expr = "a" + sgl.gen("x") + "b"
    assert [type(e) for e in expr.items] == [ir.Text, ir.Gen, ir.Text]
    with pytest.raises(TypeError, match="cannot append"):
        ir.to_exprs(3)


def test_public_names_default_backend_bind_and_direct_call():
    from radixlm.lang import api

    import radixlm

    for name in ("function", "gen", "gen_int", "gen_string", "select", "image", "system", "user", "assistant",
                 "system_begin", "system_end", "user_begin", "user_end", "assistant_begin", "assistant_end",
                 "set_default_backend", "RuntimeEndpoint", "ProgramState", "token_length_normalized",
                 "greedy_token_selection", "unconditional_likelihood_normalized"):
        assert getattr(api, name) is getattr(radixlm, name)

    @sgl.function()
    def greet(s, who, punct):
        s += "Hi " + who + punct + sgl.gen("r", 2)

    sgl.set_default_backend(ToyBackend())
    try:
        s = greet.bind(punct="!")(who="Ann")  # calling a program runs it on the default backend
        assert s.text() == "Hi Ann!xx" and isinstance(s, sgl.ProgramState)
    finally:
        sgl.set_default_backend(None)
    with pytest.raises(ValueError, match="no backend"):
        greet.run(who="Bo", punct=".")
    with pytest.raises(TypeError, match="backend must be"):
        greet.run(who="Bo", punct=".", backend=object())


def test_bad_arguments_raise_precise_errors():
    with pytest.raises(ValueError, match="image"):
        sgl.image("cat.png")
    with pytest.raises(ValueError, match="dtype"):
        sgl.gen("x", dtype=list)
    with pytest.raises(ValueError, match="temperature"):
        sgl.gen("x", temperature=-1)
    with pytest.raises(ValueError, match="json_schema"):
        sgl.gen("x", json_schema="{not json")
    with pytest.raises(TypeError, match="json_schema"):
        sgl.gen("x", json_schema=3)
    with pytest.raises(ValueError, match="choices"):
        sgl.select("x", [])
    with pytest.raises(TypeError, match="run_batch got unknown keyword"):
        sgl.function(lambda s: None).run_batch([{}], backend=ToyBackend(), temprature=0)


def test_async_stream_with_meta_data():
    import asyncio

    @sgl.function
    def prog(s):
        s += "q:" + sgl.gen("a", max_tokens=3)

    s = prog.run(stream=True, backend=ToyBackend(delay_s=0.01))

    async def collect():
        return [item async for item in s.text_async_iter("a", return_meta_data=True)]

    items = asyncio.run(collect())
    assert "".join(chunk for chunk, _ in items) == "xxx"
    assert items[-1][1]["completion_tokens"] == 3
