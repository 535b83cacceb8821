"""A model's sampling defaults (generation_config.json, a GGUF's general.sampling.* keys) fill the
sampler fields a request leaves unset, on every route into the engine; explicit values always win;
``--sampling-defaults openai`` / ``--generation-config vllm`` restore the built-in ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from radixlm.runtime.engine.engine import load_sampling_defaults
from radixlm.runtime.sampling_params import SamplingDefaults, SamplingParams
from radixlm.runtime.server.chat.request import read_sampler_fields
from radixlm.runtime.server.transport.body import FieldReader
from radixlm.runtime.server_args import ServerArgs

from radixlm import Engine

MODEL_DEFAULTS = {"temperature": 0.6, "top_p": 0.9, "top_k": 1, "repetition_penalty": 1.05}
PROMPT = "The capital of France is"


def _with_generation_config(src: str, dest: Path, values: dict) -> Path:
    shutil.copytree(src, dest)
    path = dest / "generation_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, **values}))
    return dest


@pytest.fixture(scope="module")
def model_dir(tiny_llama, tmp_path_factory) -> Path:
    return _with_generation_config(tiny_llama, tmp_path_factory.mktemp("gen") / "model", MODEL_DEFAULTS)


@pytest.fixture(scope="module")
def engine(model_dir):
    with Engine(str(model_dir), max_total_tokens=2048, grammar_warmup=False) as e:
        yield e


def _params(engine: Engine, sampling) -> SamplingParams:
    reqs, _ = engine._make_reqs(PROMPT, sampling, None, False, None, 0, False, None, None)
    return reqs[0].params


@pytest.mark.unit
def test_explicit_fields_are_tracked_not_compared():
    d = SamplingDefaults({"temperature": 0.6, "top_p": 0.9}, "test")
    # an explicit value equal to the built-in default still wins
    p = SamplingParams(temperature=1.0).with_defaults(d)
    assert (p.temperature, p.top_p) == (1.0, 0.9)
    assert SamplingParams.from_dict({"max_new_tokens": 4}).with_defaults(d).temperature == 0.6
    assert SamplingParams().replace(top_p=1.0).with_defaults(d).top_p == 1.0
    # reset: the field is unset again, so the model's default applies
    assert SamplingParams(temperature=0.0).reset("temperature").with_defaults(d).temperature == 0.6
    q = SamplingParams().with_defaults(d)
    assert q.explicit == frozenset() and q.with_defaults(SamplingDefaults({"temperature": 0.2})).temperature == 0.2


@pytest.mark.unit
def test_defaults_read_from_generation_config_and_gguf_keys(caplog):
    d = SamplingDefaults.from_generation_config(
        {"temperature": 0.7, "top_k": 0, "top_p": 0.8, "do_sample": True, "min_p": 0.05, "eos_token_id": 2}, "g")
    assert d.values == {"temperature": 0.7, "top_p": 0.8, "top_k": -1, "min_p": 0.05}
    g = SamplingDefaults.from_gguf_metadata({"general.sampling.temp": 0.5, "general.sampling.top_k": 40,
                                             "general.sampling.penalty_repeat": 1.1,
                                             "general.sampling.mirostat": 2, "general.name": "x"}, "m.gguf")
    assert g.values == {"temperature": 0.5, "top_k": 40, "repetition_penalty": 1.1}
    bad = SamplingDefaults.from_generation_config({"temperature": "hot", "top_p": 0.0, "top_k": 5}, "g")
    assert bad.values == {"top_k": 5}  # the invalid ones are logged and left to the built-in defaults
    assert "temperature" in caplog.text and "top_p" in caplog.text


@pytest.mark.unit
def test_openai_body_without_sampler_fields_sets_none():
    assert read_sampler_fields(FieldReader({"max_tokens": 5}), ("max_tokens",)) == {"max_new_tokens": 5}
    got = read_sampler_fields(FieldReader({"temperature": 1.0, "top_p": 1.0}), ("max_tokens",))
    assert got == {"temperature": 1.0, "top_p": 1.0}


@pytest.mark.unit
def test_flags_select_the_source():
    assert ServerArgs().sampling_defaults_from() == "auto"
    assert ServerArgs(sampling_defaults="openai").sampling_defaults_from() is None
    assert ServerArgs(generation_config="vllm").sampling_defaults_from() is None
    assert ServerArgs(generation_config="/some/folder").sampling_defaults_from() == "/some/folder"
    with pytest.raises(ValueError, match="sampling_defaults"):
        ServerArgs(sampling_defaults="hf")


def test_request_without_sampler_fields_takes_the_models(engine):
    for sampling in (None, {"max_new_tokens": 4}, SamplingParams(max_new_tokens=4)):
        p = _params(engine, sampling)
        assert (p.temperature, p.top_p, p.top_k, p.repetition_penalty) == (0.6, 0.9, 1, 1.05)
    explicit = _params(engine, {"temperature": 1.0, "top_k": -1})
    assert (explicit.temperature, explicit.top_k, explicit.top_p) == (1.0, -1, 0.9)
    assert _params(engine, {"temperature": 0}).is_greedy
    assert "sampling defaults temperature=0.6 top_p=0.9 top_k=1 repetition_penalty=1.05 " \
           "(generation_config.json)" in engine.summary().line()


def test_model_defaults_change_what_is_sampled(engine):
    # top_k=1 from the model: a request without sampler fields is greedy whatever its seed
    greedy = engine.generate(PROMPT, {"temperature": 0, "max_new_tokens": 12})["output_ids"]
    for seed in (1, 2, 3):
        assert engine.generate(PROMPT, {"max_new_tokens": 12, "seed": seed})["output_ids"] == greedy


def test_flag_restores_the_builtin_defaults(model_dir, tmp_path):
    with Engine(str(model_dir), max_total_tokens=2048, grammar_warmup=False, sampling_defaults="openai") as e:
        p = _params(e, None)
        assert (p.temperature, p.top_p, p.top_k, p.repetition_penalty) == (1.0, 1.0, -1, 1.0)
        assert "sampling defaults temperature=1.0 top_p=1.0 top_k=-1 (built-in" in e.summary().line()
    assert load_sampling_defaults(ServerArgs(generation_config="vllm").sampling_defaults_from(),
                                  str(model_dir)).values == {}
    other = tmp_path / "other"
    other.mkdir()
    (other / "generation_config.json").write_text(json.dumps({"temperature": 0.3}))
    assert load_sampling_defaults(str(other), str(model_dir)).values == {"temperature": 0.3}
    with pytest.raises(ValueError, match="generation_config"):
        load_sampling_defaults(str(tmp_path / "missing"), str(model_dir))


def test_gguf_sampling_keys_are_the_defaults(tiny_llama, tmp_path):
    from gguf_files import write_gguf

    path = write_gguf(tiny_llama, tmp_path / "model.gguf", sampling={"temp": 0.4, "top_k": 1, "top_p": 0.8})
    defaults = load_sampling_defaults("auto", str(path))
    assert defaults.values == pytest.approx({"temperature": 0.4, "top_p": 0.8, "top_k": 1})
    assert "model.gguf general.sampling.*" in defaults.source
    with Engine(str(path), max_total_tokens=2048, grammar_warmup=False) as e:
        p = _params(e, {"max_new_tokens": 4})
        assert (p.top_k, p.top_p) == (1, pytest.approx(0.8))
        greedy = e.generate(PROMPT, {"temperature": 0, "max_new_tokens": 8})["output_ids"]
        assert e.generate(PROMPT, {"max_new_tokens": 8, "seed": 5})["output_ids"] == greedy
