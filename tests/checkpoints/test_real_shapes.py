"""Real-shape checkpoints (Qwen2.5-0.5B, Qwen3-0.6B, Llama-3.2-1B with random bfloat16 weights).

Each checkpoint must load in our engine, give HF transformers' logits on a short prompt (both loaded
in float32 from the same bfloat16 files, so the weights are identical), and carry the real
tokenizer and chat template (rendered as transformers renders it). One model is in memory at a
time: a 1B model is ~5 GB in float32. Building needs the llama.cpp fixtures (skip when offline).
"""

from __future__ import annotations

import gc
import json
import time

import pytest
import torch
from llamacpp_assets import fetch_or_reason
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable
from radixlm.runtime.model.model_loader import load_model
from radixlm.runtime.scheduler.batch import BatchSpec
from radixlm.runtime.testing import checkpoint_path
from radixlm.runtime.testing.llamacpp_fixtures import FETCH_COMMAND, FixturesMissing
from radixlm.runtime.testing.real_shapes import REAL_MODELS, make_real_checkpoint
from radixlm.runtime.tokenizer.tokenizer import Tokenizer

# Float32 on both sides; the differences are summation order over hidden sizes up to 8192.
ATOL = 2e-3
PROMPT = "The quick brown fox jumps over the lazy dog. 1 + 1 = 2"
CONVERSATION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"}]
MODELS = sorted(REAL_MODELS)


@pytest.fixture(scope="module")
def built():
    """(arch, size) -> the cached checkpoint path (built on first use; timings printed)."""
    if isinstance(reason := fetch_or_reason(), str):
        pytest.skip(reason)

    def get(arch: str, size: str) -> str:
        start = time.perf_counter()
        path = checkpoint_path(arch, size)
        print(f"{arch}-{size}: ready in {time.perf_counter() - start:.1f}s at {path}")
        return path

    return get


def our_logits(path: str, ids: list[int]) -> torch.Tensor:
    """All-position logits of one prompt through our model (float32, torch attention)."""
    model, config = load_model(path, dtype="float32", device="cpu", attention_backend="torch")
    n = len(ids)
    pool = KVPool(n + 1, config.num_layers, config.num_kv_heads, config.head_dim, torch.float32, "cpu")
    table = ReqToTokenTable(1, n + 1, "cpu")
    spec = BatchSpec(is_decode=False, req_pool_indices=[0], input_ids=ids, prefix_lens=[0], extend_lens=[n],
                     out_cache_loc=list(range(1, n + 1)), logits_indices=list(range(n)), table_writes=[])
    with torch.no_grad():
        logits = model.forward(ForwardBatch.from_spec(spec, table, "cpu"), pool).clone()
    del model, pool
    gc.collect()
    return logits


def hf_logits(path: str, ids: list[int]) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = ref(torch.tensor([ids])).logits[0].float()
    del ref
    gc.collect()
    return logits


@pytest.mark.parametrize("arch,size", [m if m == ("qwen2", "0.5b") else pytest.param(*m, marks=pytest.mark.slow)
                                       for m in MODELS])  # one in the default run: each loads HF's model too
def test_logits_match_transformers(arch, size, built):
    path = built(arch, size)
    ids = Tokenizer(path).encode(PROMPT)
    ours = our_logits(path, ids)
    ref = hf_logits(path, ids)
    assert ours.shape == ref.shape == (len(ids), REAL_MODELS[(arch, size)].config["vocab_size"])
    diff = (ours - ref).abs().max().item()
    print(f"{arch}-{size}: max |logit diff| {diff:.2e} (logit std {ref.std().item():.2f})")
    assert diff <= ATOL
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


@pytest.mark.parametrize("arch,size", MODELS)
def test_real_config_tokenizer_and_template(arch, size, built):
    from transformers import AutoTokenizer

    path = built(arch, size)
    model = REAL_MODELS[(arch, size)]
    with open(f"{path}/config.json", encoding="utf-8") as handle:
        assert json.load(handle) == model.config
    ours, hf = Tokenizer(path), AutoTokenizer.from_pretrained(path)
    assert ours.vocab_size == hf.vocab_size + len(hf.get_added_vocab()) - _added_in_base(hf)
    assert ours.vocab_size <= model.config["vocab_size"]
    assert ours.encode(PROMPT) == hf.encode(PROMPT, add_special_tokens=False)
    for generation_prompt in (True, False):
        expected = hf.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=generation_prompt)
        assert ours.apply_chat_template(CONVERSATION, add_generation_prompt=generation_prompt) == expected
    assert set(model.eos_token_ids) <= set(ours.eos_token_ids)
    rendered = ours.apply_chat_template(CONVERSATION)
    marker = "<|start_header_id|>" if arch == "llama" else "<|im_start|>"
    assert ours.hf.token_to_id(marker) in ours.encode(rendered)


def _added_in_base(hf) -> int:
    """Added tokens whose ids fall inside the base vocabulary (counted once, not twice)."""
    return sum(1 for i in hf.get_added_vocab().values() if i < hf.vocab_size)


def test_engine_loads_and_generates(built):
    import radixlm

    path = built("qwen2", "0.5b")
    engine = radixlm.Engine(path)
    try:
        out = engine.generate("Hello", {"max_new_tokens": 4, "temperature": 0.0})
        assert isinstance(out, dict) and "text" in out
    finally:
        engine.shutdown()
        gc.collect()


def test_missing_fixtures_name_the_prefetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(FixturesMissing, match=FETCH_COMMAND.replace(".", r"\.")):
        make_real_checkpoint(tmp_path / "ckpt", "qwen2", "0.5b")


def test_unknown_real_size_is_rejected():
    with pytest.raises(ValueError, match="choose from"):
        make_real_checkpoint("/nonexistent", "mistral", "0.5b")
