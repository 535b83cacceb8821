"""A streamed request with ``stop_regex`` streams the text no match can still cover, as it is
generated, and holds back only where a match may begin (the matcher's live threads)."""

from __future__ import annotations

import pytest

from radixlm import Engine


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=4096) as e:
        yield e


def forcing(engine, text: str) -> dict:
    token = next(i for i in range(engine.tokenizer.vocab_size) if engine.tokenizer.decode([i]) == text)
    return {"temperature": 0.0, "logit_bias": {str(token): 100.0}, "ignore_eos": True}


def test_text_before_a_possible_match_is_streamed_early(engine):
    params = {**forcing(engine, "a"), "max_new_tokens": 12, "stop_regex": "b[0-9]+"}
    chunks = [c["text"] for c in engine.generate("x", params, stream=True)]
    assert "".join(chunks) == "a" * 12
    # streamed as generated, not held to the end (a step may carry several tokens: verified drafts)
    assert sum(1 for c in chunks if c) >= 3


def test_a_match_in_progress_is_held_back(engine):
    params = {**forcing(engine, "a"), "max_new_tokens": 12, "stop_regex": "a+b"}
    chunks = [c["text"] for c in engine.generate("x", params, stream=True)]
    assert "".join(chunks) == "a" * 12 and all(c == "" for c in chunks[:-1])
