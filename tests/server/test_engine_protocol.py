"""The server's view of an engine (``ServedEngine``) is a subset of ``Engine``'s members."""

from __future__ import annotations

import pytest
from radixlm.runtime.engine import Engine
from radixlm.runtime.sampling_params import SamplingParams
from radixlm.runtime.server.transport.state import ServedEngine, ServedModelConfig, ServedTokenizer


def test_engine_has_every_member_the_server_uses():
    with Engine(max_total_tokens=2048, random_seed=0) as engine:
        assert isinstance(engine, ServedEngine)
        assert isinstance(engine.tokenizer, ServedTokenizer)
        assert isinstance(engine.model_config, ServedModelConfig)
        typed = engine.generate("Hi", SamplingParams(max_new_tokens=3, temperature=0.0))
        plain = engine.generate("Hi", {"max_new_tokens": 3, "temperature": 0.0})
        assert typed["output_ids"] == plain["output_ids"]


def test_replace_validates_and_leaves_the_original_alone():
    params = SamplingParams(stop=["x"], seed=1, json_object=True)
    copy = params.replace(seed=2).reset("stop", "json_object")
    assert (copy.seed, copy.stop, copy.json_object) == (2, [], False)
    assert (params.seed, params.stop, params.json_object) == (1, ["x"], True)
    with pytest.raises(ValueError, match="top_k"):
        params.replace(top_k=0)
