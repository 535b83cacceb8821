"""``stop_regex`` (SGLang's sampling parameter): generation stops at the earliest match in the
output text, which is cut there (unless ``no_stop_trim``), streamed or not."""

from __future__ import annotations

import re

import pytest

from radixlm import Engine

PROMPT = "Once upon a time"
BASE = {"temperature": 0.0, "max_new_tokens": 40}


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=4096) as e:
        yield e


@pytest.fixture(scope="module")
def free_text(engine) -> str:
    return engine.generate(PROMPT, BASE)["text"]


def first_word_pattern(text: str) -> str:
    """A regex matching the first word of 4+ letters in ``text`` (one the output really contains)."""
    word = re.search(r"[A-Za-z]{4,}", text)
    assert word is not None, text
    return re.escape(word.group(0)[:4]) + r"[A-Za-z]*"


def test_stops_at_the_earliest_match_and_trims(engine, free_text):
    pattern = first_word_pattern(free_text)
    m = re.search(pattern, free_text)
    out = engine.generate(PROMPT, {**BASE, "stop_regex": [r"\d{9}", pattern]})
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert out["text"] == free_text[:m.start()]
    assert re.fullmatch(pattern, out["meta_info"]["finish_reason"]["matched"])
    kept = engine.generate(PROMPT, {**BASE, "stop_regex": pattern, "no_stop_trim": True})
    assert kept["text"].startswith(free_text[:m.start()]) and re.search(pattern, kept["text"])


def test_streamed_text_equals_the_final_text(engine, free_text):
    pattern = first_word_pattern(free_text)
    whole = engine.generate(PROMPT, {**BASE, "stop_regex": pattern})
    chunks = list(engine.generate(PROMPT, {**BASE, "stop_regex": pattern}, stream=True))
    assert "".join(c["text"] for c in chunks) == whole["text"]


def test_no_match_runs_to_the_length_limit(engine, free_text):
    out = engine.generate(PROMPT, {**BASE, "stop_regex": r"\d{20}"})
    assert out["text"] == free_text and out["meta_info"]["finish_reason"]["type"] == "length"


@pytest.mark.parametrize("bad", ["(unclosed", "", 5, ["ok", ""]])
def test_bad_patterns_are_clear_errors(engine, bad):
    with pytest.raises(ValueError, match="stop_regex"):
        engine.generate(PROMPT, {**BASE, "stop_regex": bad})
