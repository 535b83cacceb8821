"""``Engine.flush_cache`` (what ``/flush_cache`` calls) also releases the compiled grammars, and
the engine passes ``--grammar-matcher-max-mb`` and each call's caller id to the grammar backend."""

from __future__ import annotations

import pytest

from radixlm import Engine


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=4096, grammar_cache_mb=8, grammar_matcher_max_mb=32) as e:
        yield e


def backend(engine):
    return engine._grammar.backend()


def test_flush_cache_empties_the_grammar_cache(engine):
    for i in range(3):
        out = engine.generate("Code:", {"max_new_tokens": 8, "regex": f"c{i}[0-9]{{2}}"})
        assert out["text"].startswith(f"c{i}")
    b = backend(engine)
    assert b.cache_bytes == 8 << 20 and b.matcher_max_mb == 32
    assert b.cache_info()["entries"] == 3 and b.cache_info()["bytes"] > 0
    assert engine.flush_cache()
    assert b.cache_info() == {"entries": 0, "bytes": 0}
    engine.check_no_leak()


def test_a_grammar_over_the_matcher_bound_fails_its_request_only(engine):
    with pytest.raises(ValueError, match=r"over the 32 MB bound \(--grammar-matcher-max-mb\)"):
        engine.generate("Code:", {"max_new_tokens": 8, "regex": "x{400000}"})
    assert backend(engine).stats["over_matcher_bound"] == 1
    out = engine.generate("Code:", {"max_new_tokens": 4, "regex": "[a-z]{4}"})
    assert len(out["text"]) == 4
    engine.check_no_leak()
