"""Faithful structured output on the real Qwen2.5-Coder-0.5B-Instruct Q4_K_M file (slow).

- The twenty extraction tasks of ``benchmarks/extraction_set.py`` (nested objects, enums, string
  arrays): greedy output with every acceleration on (grammar drafts, prompt and radix drafts) is
  token-identical to plain masked decoding, one token a step; the string arrays the documents fill
  come back filled (jump-forward's splice once emptied them).
- Field accuracy under the schema is at least that of plain JSON prompting (the same prompt, no
  constraint, the first JSON object of the answer parsed), against the facts the documents state.
- ``tool_choice: "required"`` makes the calls ``auto`` makes on prompts where ``auto`` calls a tool
  (the forced grammar lets the model end its turn as it ends it under ``auto``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest
from real_models import QWEN_CODER, real_gguf_file
from serve_process import serve

from radixlm import Engine

pytestmark = pytest.mark.slow
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from extraction_set import DOCUMENTS, PROMPT, SCHEMAS, TRUTH, field_score  # noqa: E402


@pytest.fixture(scope="module")
def gguf() -> Path:
    return real_gguf_file(QWEN_CODER)


def prompt_ids(engine: Engine, kind: str, document: str) -> list[int]:
    fields = ", ".join(SCHEMAS[kind]["properties"])
    text = engine.tokenizer.apply_chat_template([{"role": "user", "content": PROMPT.format(
        fields=fields, document=document)}])
    return engine.tokenizer.encode(text, add_special_tokens=False)


def test_extraction_is_token_identical_with_drafts_and_arrays_come_back_filled(gguf):
    outs = {}
    for algo in ("NGRAM", None):
        with Engine(str(gguf), max_total_tokens=8192, speculative_algorithm=algo, log_level="error") as e:
            prompts = [prompt_ids(e, kind, doc) for kind, doc in DOCUMENTS]
            params = [{"temperature": 0.0, "max_new_tokens": 256, "json_schema": SCHEMAS[kind]}
                      for kind, _ in DOCUMENTS]
            outs[algo] = [e.generate(input_ids=p, sampling_params=s) for p, s in zip(prompts, params)]
    drafted = 0
    for (kind, doc), a, b in zip(DOCUMENTS, outs["NGRAM"], outs[None]):
        assert a["output_ids"] == b["output_ids"], doc[:40]
        drafted += a["meta_info"].get("spec_accepted_tokens", 0)
        value = json.loads(a["text"])
        jsonschema.validate(value, SCHEMAS[kind])
        if kind == "person":
            assert value["skills"], doc[:40]  # every person document names skills
        if kind == "invoice":
            assert value["line_items"], doc[:40]
    assert drafted > 100


def first_json(text: str) -> object:
    """The first JSON object in a free answer (code fences and prose around it skipped)."""
    start = text.find("{")
    while start >= 0:
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except ValueError:
            start = text.find("{", start + 1)
    return None


def test_schema_accuracy_is_at_least_plain_json_prompting(gguf):
    with Engine(str(gguf), max_total_tokens=8192, log_level="error") as e:
        scores = {"schema": [0, 0], "plain": [0, 0]}
        for (kind, doc), truth in zip(DOCUMENTS, TRUTH):
            ids = prompt_ids(e, kind, doc)
            for mode, extra in (("schema", {"json_schema": SCHEMAS[kind]}), ("plain", {})):
                out = e.generate(input_ids=ids, sampling_params={"temperature": 0.0, "max_new_tokens": 256, **extra})
                right, asked = field_score(first_json(out["text"]), truth)
                scores[mode][0] += right
                scores[mode][1] += asked
    assert scores["schema"][1] == scores["plain"][1] > 100
    assert scores["schema"][0] >= scores["plain"][0], scores


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
QUESTIONS = ["What's the weather like in Berlin right now?", "Is it raining in Lima?",
             "How warm is it in Oslo today?"]


def test_required_makes_the_calls_auto_makes(gguf, tmp_path):
    with serve(gguf, tmp_path, "--max-total-tokens", "8192") as client:
        for question in QUESTIONS:
            calls = {}
            for choice in ("auto", "required"):
                out = client.chat.completions.create(
                    model="default", temperature=0, max_tokens=128, tools=WEATHER, tool_choice=choice,
                    messages=[{"role": "user", "content": question}])
                msg = out.choices[0].message
                calls[choice] = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
                assert out.choices[0].finish_reason == ("tool_calls" if calls[choice] else "stop")
            if calls["auto"]:
                assert calls["required"] == calls["auto"], question
            assert len(calls["required"]) >= 1
