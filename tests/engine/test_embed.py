"""``Engine.embed``: the final hidden state, pooled as the checkpoint declares it and L2-normalised,
against transformers' ``last_hidden_state`` on the same checkpoint; batched equals one by one; the
radix cache is neither read nor written; bad inputs are errors naming ``input``."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from radixlm.runtime.engine import Engine
from radixlm.runtime.model.model_runner import declared_pooling
from transformers import AutoModel

ATOL = 1e-4
TEXTS = ["The cat sat on the mat.", "hi", "Paris is the capital of France, and Lyon is a city too."]


@pytest.fixture(scope="module")
def engine(tiny_llama):
    with Engine(tiny_llama, max_total_tokens=4096, random_seed=0) as eng:
        yield eng


@pytest.fixture(scope="module")
def hf_states(tiny_llama):
    """transformers' normalised ``last_hidden_state`` rows of each text, [len, hidden]."""
    model = AutoModel.from_pretrained(tiny_llama, torch_dtype=torch.float32).eval()

    def states(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return model(torch.tensor([ids])).last_hidden_state[0]
    return states


def ids_of(engine: Engine, texts: list[str]) -> list[list[int]]:
    return [engine.tokenizer.encode(t, add_special_tokens=True) for t in texts]


def test_last_token_pooling_matches_transformers(engine, hf_states):
    assert engine.runner.pooling == "last"
    token_lists = ids_of(engine, TEXTS)
    got = torch.tensor(engine.embed(token_lists))
    want = torch.stack([torch.nn.functional.normalize(hf_states(ids)[-1], dim=-1) for ids in token_lists])
    assert torch.allclose(got, want, atol=ATOL)
    assert torch.allclose(got.norm(dim=-1), torch.ones(len(TEXTS)), atol=1e-5)


def test_a_batch_equals_its_inputs_one_by_one_and_leaves_the_cache_alone(engine):
    token_lists = ids_of(engine, TEXTS)
    before = engine.get_stats()
    batch = torch.tensor(engine.embed(token_lists))
    singles = torch.tensor([engine.embed([ids])[0] for ids in token_lists])
    assert torch.allclose(batch, singles, atol=ATOL)
    after = engine.get_stats()
    assert (after["radix_cache_tokens"], after["prompt_tokens"]) == (before["radix_cache_tokens"], before["prompt_tokens"])
    engine.check_no_leak()


@pytest.mark.parametrize("bad, words", [([], "at least one"), ([[]], "input\\[0\\] is empty"),
                                        ([[1], [10**9]], "input\\[1\\] holds a token id"),
                                        ([[1] * 5000], "more than the context")])
def test_bad_inputs_are_errors_naming_input(engine, bad, words):
    with pytest.raises(ValueError, match=words):
        engine.embed(bad)


def test_a_sentence_transformers_mean_pooling_config_is_followed(tiny_llama, tmp_path, hf_states):
    path = tmp_path / "mean-pooled"
    shutil.copytree(tiny_llama, path, ignore=shutil.ignore_patterns("model.safetensors"))
    os.symlink(os.path.join(tiny_llama, "model.safetensors"), path / "model.safetensors")
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    assert declared_pooling(str(path)) == "mean" and declared_pooling(tiny_llama) == "last"
    with Engine(str(path), max_total_tokens=1024, random_seed=0) as eng:
        token_lists = ids_of(eng, TEXTS[:2])
        got = torch.tensor(eng.embed(token_lists))
    want = torch.stack([torch.nn.functional.normalize(hf_states(ids).mean(0), dim=-1) for ids in token_lists])
    assert torch.allclose(got, want, atol=ATOL)


@pytest.mark.parametrize("kind, pooling", [(1, "mean"), (2, "cls"), (3, "last"), (0, "last"), (None, "last")])
def test_a_gguf_files_pooling_type_is_read(tmp_path, kind, pooling):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    if kind is not None:
        writer.add_uint32("llama.pooling_type", kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert declared_pooling(str(path)) == pooling
