"""The real Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF (Q5_0, Q8_0, Q4_K, Q6_K and F32 tensors), served
from the file alone (slow: a 0.5B model on the CPU).

- Greedy tokens against transformers on the same file's weights dequantized to float32
  (``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)``): teacher-forced on transformers'
  own greedy continuation, our top-1 must equal its top-1 at every position where its top-1/top-2
  gap exceeds ``GAP_TOLERANCE``. That bound covers what the block kernels add to the dequantized
  weights' float32 product, the activations rounded to 8-bit blocks of 32 as llama.cpp does (worst
  logit difference measured here: ``MEASURED_MAX_DIFF``); inside it the top-1 may honestly differ.
- Greedy tokens against llama.cpp (llama-cpp-python, where installed) on the file itself, by the same
  rule: its greedy continuation teacher-forced through ours.
- ``radixlm serve --model-path FILE.gguf``: a chat answer that ends on EOS, a JSON-schema extraction
  that validates, a forced tool call.
- Resident memory after loading and one 512-token request, with a 4096-token KV pool, against the
  issue's bound: 1.3x llama.cpp's 0.97 GB for the same file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import jsonschema
import pytest
import torch
from prefill_logits import prefill_logits
from real_models import QWEN_CODER, real_gguf_file
from serve_process import serve

pytestmark = pytest.mark.slow

GAP_TOLERANCE = 1.0  # logits: twice the bound on |our logit - transformers'| asserted below
MEASURED_MAX_DIFF = 0.28  # the worst logit difference seen on two of QUESTIONS (x86-64, AVX2)
# Against llama.cpp's logits on the file: its float16 KV cache and its 256-blocks of activations for the
# K-quant rows add to the gap; the worst difference seen on four chat prompts was 0.63 (AVX-512 VNNI).
LLAMACPP_GAP_TOLERANCE = 1.6
LLAMACPP_RSS_MB = 0.97 * 1000  # the llama.cpp figure for this file
RSS_BOUND = 1.3
QUESTIONS = ["Write a python function that reverses a string.", "What is the capital of France?",
             "Explain what a hash map is in one sentence."]
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def qwen() -> Path:
    return real_gguf_file(QWEN_CODER)


def _clear_positions_agree(got: torch.Tensor, want: torch.Tensor, gap: float, label: str) -> int:
    """Our top-1 equals the reference's wherever its top-1/top-2 gap exceeds ``gap``, and no logit is
    off by more than ``gap / 2``; returns how many positions were clear-cut."""
    top2 = want.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > gap
    assert (got.argmax(-1) == want.argmax(-1))[clear].all(), label
    assert (got - want).abs().max().item() <= gap / 2, label
    return int(clear.sum())


def test_greedy_tokens_match_transformers_on_the_dequantized_weights(qwen):
    pytest.importorskip("accelerate", reason="transformers loads GGUF files only with accelerate installed")
    from radixlm.runtime.model.model_loader import load_model
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = AutoModelForCausalLM.from_pretrained(str(qwen.parent), gguf_file=qwen.name, dtype=torch.float32)
    ours, _ = load_model(qwen)
    tok = Tokenizer.from_gguf(qwen)
    compared = 0
    for question in QUESTIONS:
        prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))
        with torch.no_grad():
            seq = hf.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False)[0].tolist()
            want = hf(torch.tensor([seq])).logits[0, len(prompt) - 1:-1].float()  # [new tokens, vocab]
        compared += _clear_positions_agree(prefill_logits(ours, seq)[len(prompt) - 1:-1], want, GAP_TOLERANCE, question)
    assert compared >= len(QUESTIONS) * NEW_TOKENS // 2  # most positions are clear-cut


def test_greedy_tokens_match_llamacpp_on_the_gguf(qwen):
    """llama.cpp's own greedy continuation, teacher-forced through ours: the same top-1 wherever its
    top-1/top-2 gap is clear of what the two engines' kernels may differ by."""
    llama_cpp = pytest.importorskip(
        "llama_cpp", reason="llama-cpp-python is not installed (benchmarks/build_llamacpp.sh builds 0.3.36)")
    from radixlm.runtime.model.model_loader import load_model
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    llm = llama_cpp.Llama(model_path=str(qwen), n_ctx=512, logits_all=True, verbose=False)
    ours, _ = load_model(qwen)
    tok = Tokenizer.from_gguf(qwen)
    compared = 0
    for question in QUESTIONS:
        prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))
        llm.reset()
        llm.eval(prompt)
        seq = list(prompt)
        for _ in range(NEW_TOKENS):
            seq.append(int(llm.scores[llm.n_tokens - 1].argmax()))
            llm.eval(seq[-1:])
        want = torch.from_numpy(llm.scores[len(prompt) - 1:len(seq) - 1].copy()).float()  # [new tokens, vocab]
        compared += _clear_positions_agree(prefill_logits(ours, seq)[len(prompt) - 1:-1], want, LLAMACPP_GAP_TOLERANCE,
                                           question)
    assert compared >= len(QUESTIONS) * NEW_TOKENS // 2


@pytest.fixture(scope="module")
def client(qwen, tmp_path_factory):
    with serve(qwen, tmp_path_factory.mktemp("gguf-serve"), "--max-total-tokens", "4096",
               "--context-length", "4096", timeout_s=600) as c:
        yield c


def test_chat_answer_ends_on_eos(client):
    out = client.chat.completions.create(model="default", temperature=0, max_tokens=64, messages=[
        {"role": "user", "content": "What is the capital of France? Answer in one word."}])
    choice = out.choices[0]
    assert choice.finish_reason == "stop" and "Paris" in choice.message.content
    assert "<|im_end|>" not in choice.message.content


def test_json_schema_extraction_validates(client):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    out = client.chat.completions.create(
        model="default", temperature=0, max_tokens=64,
        messages=[{"role": "user", "content": "Extract the person as JSON: Alice Smith is 34 years old."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}})
    data = json.loads(out.choices[0].message.content)
    jsonschema.validate(data, schema)
    assert data["age"] == 34 and "Alice" in data["name"]


def test_forced_tool_call(client):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "The current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    out = client.chat.completions.create(
        model="default", temperature=0, max_tokens=64, tools=tools, tool_choice="required",
        messages=[{"role": "user", "content": "What's the weather like in Paris today?"}])
    calls = out.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    assert "Paris" in json.loads(calls[0].function.arguments)["city"]


def test_resident_memory_after_a_512_token_request(qwen, tmp_path):
    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gguf_memory.py"
    out = tmp_path / "memory.json"
    subprocess.run([sys.executable, str(bench), "--model", str(qwen), "--context", "4096",
                    "--prompt-tokens", "512", "--json", str(out)], check=True, timeout=900)
    figures = json.loads(out.read_text())
    print(figures)
    assert figures["prompt_tokens"] == 512
    assert figures["rss_after_request_mb"] <= RSS_BOUND * LLAMACPP_RSS_MB, figures
