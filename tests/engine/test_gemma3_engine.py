"""A tiny Gemma 3 served by the ``Engine`` (CPU, float32): paged KV, radix cache, sliding windows.

The checkpoint is written by transformers (``tests/gemma3_checkpoint.py``, window 8) with the
synthetic tokenizer; prompts are several windows long, so every decode step of the sliding layers
hides old keys that the pool still holds (and the radix cache shares). Greedy output must equal
transformers' ``generate`` token for token, with and without a cached prefix.
"""

from __future__ import annotations

import pytest
import torch
from gemma3_checkpoint import WINDOW, write_gemma3_checkpoint
from transformers import AutoModelForCausalLM

from radixlm import Engine

NEW_TOKENS = 3 * WINDOW
GREEDY = {"temperature": 0.0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True}
PREFIX = "The quick brown fox jumps over the lazy dog while the cat sleeps on a warm mat. "


@pytest.fixture(scope="module")
def gemma3_path(tmp_path_factory, tiny_llama):
    return str(write_gemma3_checkpoint(tmp_path_factory.mktemp("gemma3-engine"), tokenizer_from=tiny_llama))


@pytest.fixture(scope="module")
def reference(gemma3_path):
    return AutoModelForCausalLM.from_pretrained(gemma3_path, dtype=torch.float32).eval()


def hf_greedy(reference, ids: list[int]) -> list[int]:
    with torch.no_grad():
        out = reference.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                 do_sample=False)
    return out[0, len(ids):].tolist()


def test_engine_greedy_equals_transformers_with_cached_prefix(gemma3_path, reference):
    with Engine(gemma3_path, max_total_tokens=4096, random_seed=0) as engine:
        prompts = [PREFIX + "Where is the fox?", PREFIX + "Who is sleeping?"]
        first = engine.generate(prompts[0], GREEDY)
        second = engine.generate(prompts[1], GREEDY)  # shares PREFIX through the radix cache
        assert second["meta_info"]["cached_tokens"] > 2 * WINDOW
        batch = engine.generate(prompts, GREEDY)  # both at once, behind the cached prefix
        for prompt, alone, batched in zip(prompts, (first, second), batch):
            ids = engine.tokenizer.encode(prompt, add_special_tokens=True)
            assert len(ids) > 2 * WINDOW
            expected = hf_greedy(reference, ids)
            assert alone["output_ids"] == expected
            assert batched["output_ids"] == expected
        engine.check_no_leak()
