"""``warm_up_backend``: a new backend's first-use caches filled ahead of its first request. It compiles
on every worker outside the cache (the cache and its statistics see nothing), walks a whole
document, and builds each per-vocabulary table once: a second warm-up or a request of the same
kinds builds none."""

from __future__ import annotations

import json

import pytest
import torch
from radixlm.constrained import GrammarBackend, warm_up_backend
from radixlm.constrained.backend import WARM_UP_DOCUMENT, WARM_UP_SCHEMA
from radixlm.runtime.sampling_params import SamplingParams

pytestmark = pytest.mark.unit


def test_the_warm_up_document_is_valid_for_its_schema():
    import jsonschema

    jsonschema.validate(json.loads(WARM_UP_DOCUMENT), WARM_UP_SCHEMA)


def test_warm_up_fills_caches_and_leaves_the_cache_alone(vocab):
    backend = GrammarBackend(vocab, num_workers=2)
    try:
        done = warm_up_backend(backend)
        assert done["compile"] == "ok"
        assert done["masks"] == len(vocab.encode(WARM_UP_DOCUMENT))  # the whole document walked
        assert backend.cache_info() == {"entries": 0, "bytes": 0}
        assert backend.stats["misses"] == 0 and backend.stats["builds"] == 0
        built = vocab.tables.builds
        assert built > 0 and vocab.tables.peek("llg") is None  # the native tokenizer is a cached property
        assert "llg" in vocab.__dict__

        assert warm_up_backend(backend)["compile"] == "ok"
        schema = {"type": "object", "properties": {"who": {"type": "string"}, "n": {"type": "integer"}},
                  "required": ["who", "n"]}
        matcher = backend.submit(SamplingParams(json_schema=json.dumps(schema))).result(timeout=60).matcher()
        row = torch.zeros(vocab.mask_words, dtype=torch.int32)
        for token in vocab.encode('{"who":"a","n":3}'):
            matcher.fill_mask(row)
            assert matcher.accept_token(token)
        assert vocab.tables.builds == built, "a table was built twice or only by the request"
    finally:
        backend.shutdown()


def test_a_shut_down_backend_warms_up_without_raising(vocab):
    backend = GrammarBackend(vocab, num_workers=1)
    backend.shutdown()
    assert warm_up_backend(backend)["compile"] == "shutdown"
