"""Shared fixtures: locally built test checkpoints (cached on disk, built once per machine)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# `python -m pytest` puts the working directory first on sys.path. Run from the clone, that makes
# the repository's root folders importable under their bare names (they are installed as
# `radixlm.<folder>`), and our `kernels/` then shadows Hugging Face's `kernels` package, which
# transformers 5.25 requires and imports (`from kernels import CUDAProperties`).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _ROOT]

# One intra-op thread: test tensors are tiny, and test processes (engines, server subprocesses)
# share two cores in CI, where oversubscribed OpenMP threads run 20x slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Keep tests off the user's real cache unless they point RADIXLM_CACHE somewhere themselves.
os.environ.setdefault("RADIXLM_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "radixlm"))


def pytest_report_header(config: pytest.Config) -> str:
    """Say where the test checkpoints go before writing gigabytes there."""
    return _cache_line()


def pytest_sessionstart(session: pytest.Session) -> None:
    """``-q`` prints no header: the cache line is written anyway (the README's command uses ``-q``)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if session.config.get_verbosity() < 0 and reporter is not None:
        reporter.write_line(_cache_line())


def _cache_line() -> str:
    cache = os.environ["RADIXLM_CACHE"]
    used = sum(f.stat().st_size for f in Path(cache).rglob("*") if f.is_file()) if os.path.isdir(cache) else 0
    return (f"radixlm cache: {cache} ({used / 2**30:.1f} GB now; the default run builds test checkpoints "
            "there, about 3 GB, and `-m slow` real-shape ones, about 6 GB; set RADIXLM_CACHE to move it)")


@pytest.fixture(scope="session")
def checkpoint():
    """Factory: ``checkpoint(arch="llama", size="tiny")`` -> path of a cached test checkpoint."""
    from radixlm.runtime.testing import checkpoint_path  # synthetic sizes, or real shapes (0.5b, ...)

    def get(arch: str = "llama", size: str = "tiny", seed: int = 0) -> str:
        return checkpoint_path(arch=arch, size=size, seed=seed)

    return get


@pytest.fixture(scope="session")
def tiny_llama(checkpoint) -> str:
    """Path of the tiny Llama checkpoint (the embedded default model)."""
    return checkpoint("llama", "tiny")


@pytest.fixture(scope="session")
def tiny_qwen3(checkpoint) -> str:
    """Path of the tiny Qwen3 checkpoint (q/k RMSNorm)."""
    return checkpoint("qwen3", "tiny")


@pytest.fixture(scope="session")
def schema_checker(tiny_llama):
    """``check(schema, good, bad, walks=0)``: in both key orders, the schema's grammar (tiny
    vocabulary) accepts every ``good`` instance (each must be valid: a table check; rewritten into
    schema order for the default order, ``accepted_in``), rejects every ``bad`` one, and the first
    ``walks`` random token walks produce outputs that validate. Returns the default order's grammar."""
    import json
    import random

    import jsonschema
    from radixlm.constrained import TokenizerVocab, compile_grammar
    from radixlm.constrained.testing.schema_order import accepted_in
    from radixlm.constrained.testing.walks import compact_json, random_walk
    from radixlm.runtime.tokenizer.tokenizer import Tokenizer

    vocab = TokenizerVocab.from_tokenizer(Tokenizer(tiny_llama))

    def check(schema, good=(), bad=(), walks: int = 0, max_tokens: int = 40):
        cls = jsonschema.validators.validator_for(schema if isinstance(schema, dict) else {})
        validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        for inst in good:
            assert validator.is_valid(inst), f"table error: {inst!r} is not valid"
        for key_order in ("any", "schema"):  # the default last: its grammar is returned
            grammar = _check_one(schema, validator, (good, bad), walks, max_tokens, key_order)
        return grammar

    def _check_one(schema, validator, table: tuple, walks: int, max_tokens: int, key_order: str):
        """One key order: ``good`` as that order writes it (``accepted_in``) accepted, ``bad`` refused."""
        good, bad = table
        grammar = compile_grammar(vocab, "json_schema", schema, key_order=key_order)
        for inst in accepted_in(schema, good, key_order):
            assert grammar.matches(compact_json(inst)), \
                f"{inst!r} should be accepted ({key_order} order) by {grammar.lark[:300]}"
        for inst in bad:
            assert not grammar.matches(compact_json(inst)), f"{inst!r} should be rejected"
        for seed in range(walks):
            walk = random_walk(grammar, random.Random(seed), max_tokens=max_tokens)
            if walk is not None:
                text = b"".join(vocab.token_bytes[t] for t in walk[0]).decode("utf-8")
                assert validator.is_valid(json.loads(text)), f"{text!r} was generated but is invalid"
        return grammar

    return check
