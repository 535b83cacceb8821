"""Honest budgets on the real-shape Qwen2.5-0.5B checkpoint (its real vocabulary and chat template,
random weights), served by ``radixlm serve``: forced small budgets close the document or the call,
and every route says so (``length`` + ``budget_closed``), never ``stop`` / ``tool_calls``; forced
calls leak no raw ``<tool_call>`` markup into ``content``. The checkpoint is built once and cached
(see ``test_real_shapes.py``); the requests are few and short, as the model is real-size."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest
import requests
from openai_reads import chat_answer
from radixlm.runtime.testing import checkpoint_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llamacpp_assets import fetch_or_reason  # noqa: E402
from serve_process import serve  # noqa: E402

ORDER = {"type": "object", "properties": {"customer": {"type": "string"}, "order_id": {"type": "integer"}},
         "required": ["customer", "order_id"], "additionalProperties": False}
WRITE = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
         "required": ["path", "content"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "write_file", "description": "Write a file", "parameters": WRITE}}]
ASK = [{"role": "user", "content": "Order 5521 from Tom Lee: extract it. Then save it to a file."}]
MARKUP = ("<tool_call>", "</tool_call>", '{"name"')


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    if isinstance(reason := fetch_or_reason(), str):
        pytest.skip(reason)
    path = checkpoint_path("qwen2", "0.5b")
    with serve(path, tmp_path_factory.mktemp("serve"), "--max-total-tokens", "4096", timeout_s=600) as c:
        yield c


def _reply_check(text: str, reason: str, closed: bool) -> None:
    assert reason in ("stop", "length"), reason
    if closed:
        assert reason == "length"
    if closed or reason == "stop":
        jsonschema.validate(json.loads(text), ORDER)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_chat_response_format_closed_by_a_small_budget(client, stream):
    closes = 0
    for budget in (8, 12, 16):
        kwargs = dict(model="default", messages=ASK, max_tokens=budget, temperature=1.0, seed=budget,
                      response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": ORDER}})
        text, reason, closed = chat_answer(client, kwargs, stream)
        _reply_check(text, reason, closed)
        closes += closed
    assert closes  # random weights ramble in the customer string: the budget closes some


def test_generate_and_completions_report_and_honour_the_switch(client):
    url = str(client.base_url).removesuffix("/v1/")
    for budget_aware in (True, False):
        body = {"text": "Order:", "sampling_params": {"max_new_tokens": 12, "temperature": 1.0, "seed": 1,
                                                      "json_schema": ORDER, "budget_aware_completion": budget_aware}}
        meta = requests.post(url + "/generate", json=body, timeout=300).json()["meta_info"]
        assert ("budget_closed" in meta) == budget_aware, meta
        c = client.completions.create(model="default", prompt="Order:", max_tokens=12, temperature=1.0, seed=1,
                                      extra_body={"json_schema": ORDER, "budget_aware_completion": budget_aware})
        c = c.choices[0]
        assert c.finish_reason == "length" and bool(getattr(c, "budget_closed", False)) == budget_aware


@pytest.mark.parametrize("budget", [6, 7, 11, 48])
def test_forced_write_file_call_within_a_small_budget(client, budget):
    out = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS, tool_choice="required",
                                         max_tokens=budget, temperature=1.0, seed=budget).choices[0]
    assert not any(m in (out.message.content or "") for m in MARKUP), out.message.content
    closed = bool(getattr(out, "budget_closed", False))
    if out.finish_reason == "tool_calls":
        assert not closed
        for call in out.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), WRITE)
    else:
        assert out.finish_reason == "length" and not out.message.tool_calls
