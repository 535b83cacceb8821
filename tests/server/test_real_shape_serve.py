"""``radixlm serve --model-path`` on the real-shape checkpoints, with no parser flags: forced tool
calls come back in OpenAI's shape, generated in the family's own syntax (detected from the real chat
template) and valid against the tool's schema, every time (several seeds); Qwen3's reasoning comes
back as ``reasoning_content``, streamed and not.

Slow (each checkpoint is 1-2.4 GB of random bf16 weights, and every request runs the real-size model
on the CPU): Qwen2.5-0.5B is in the default run, the other two in ``pytest -m slow``. The checkpoints
are built once and cached (see ``test_real_shapes.py``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest
from radixlm.runtime.chat_formats.reasoning.registry import detect_name as detect_reasoning
from radixlm.runtime.chat_formats.tool_formats.registry import detect_name as detect_tools
from radixlm.runtime.testing import checkpoint_path
from radixlm.runtime.tokenizer.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_assets import fetch_or_reason  # noqa: E402
from serve_process import serve  # noqa: E402

DEFAULT_RUN = ("qwen2", "0.5b")  # the other families are in the slow run (`pytest -m slow`)

# (arch, size) -> (tool-call parser, reasoning parser) the server detects from the real template
FAMILIES = {("qwen2", "0.5b"): ("hermes", None), ("qwen3", "0.6b"): ("hermes", "qwen3"),
            ("llama", "1b"): ("llama3", None)}
CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo", "Lima"]}, "metric": {"type": "boolean"}},
        "required": ["city", "metric"], "additionalProperties": False}
ZONE = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}
SCHEMAS = {"get_weather": CITY, "get_time": ZONE}
TOOLS = [{"type": "function", "function": {"name": n, "description": n.replace("_", " "), "parameters": s}}
         for n, s in SCHEMAS.items()]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}  # Qwen3: the call follows the prompt


@pytest.fixture(scope="module", ids=lambda k: f"{k[0]}-{k[1]}",
                params=[k if k == DEFAULT_RUN else pytest.param(k, marks=pytest.mark.slow) for k in sorted(FAMILIES)])
def served(request, tmp_path_factory):
    if isinstance(reason := fetch_or_reason(), str):
        pytest.skip(reason)
    path = checkpoint_path(*request.param)
    with serve(path, tmp_path_factory.mktemp("serve"), "--max-total-tokens", "4096", timeout_s=600) as client:
        yield request.param, path, client


def test_the_template_names_the_family(served):
    key, path, _ = served
    template = Tokenizer(path).chat_template
    assert (detect_tools(template), detect_reasoning(template)) == FAMILIES[key]


def test_forced_calls_parse_and_validate_every_time(served):
    key, _, client = served
    extra = NO_THINKING if key[0] == "qwen3" else {}
    for seed, choice in enumerate(["required", {"type": "function", "function": {"name": "get_time"}}, "required"]):
        for stream in (False, True):
            kwargs = dict(model="default", messages=ASK, tools=TOOLS, tool_choice=choice, max_tokens=60,
                          temperature=1.0, seed=seed, parallel_tool_calls=False, extra_body=extra)
            if stream:
                name, args, reason = _collect(client.chat.completions.create(**kwargs, stream=True))
            else:
                out = client.chat.completions.create(**kwargs).choices[0]
                assert len(out.message.tool_calls) == 1 and not out.message.content
                call, reason = out.message.tool_calls[0], out.finish_reason
                name, args = call.function.name, call.function.arguments
                assert call.type == "function" and call.id.startswith("call_")
            assert reason == "tool_calls", (seed, stream)
            if isinstance(choice, dict):
                assert name == "get_time"
            jsonschema.validate(json.loads(args), SCHEMAS[name])


def _collect(chunks) -> tuple[str, str, str | None]:
    name, args, reason = None, "", None
    for chunk in chunks:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                assert tc.index == 0
                name = (tc.function.name if tc.id else None) or name
                args += (tc.function.arguments or "") if tc.function else ""
            reason = choice.finish_reason or reason
    return name, args, reason


def test_qwen3_reasoning_in_openai_shape(served):
    key, path, client = served
    if key[0] != "qwen3":
        pytest.skip("no reasoning format for this family")
    think = Tokenizer(path).encode("<think>")
    assert think == [151667]
    # random weights never open a thinking by themselves: the bias makes the model start one
    kwargs = dict(model="default", messages=ASK, max_tokens=6, temperature=0, logit_bias={str(think[0]): 100})
    msg = client.chat.completions.create(**kwargs).choices[0].message
    reasoning = msg.model_extra.get("reasoning_content")
    assert reasoning and msg.content is None
    streamed = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                       for c in client.chat.completions.create(**kwargs, stream=True) if c.choices)
    assert streamed == reasoning
