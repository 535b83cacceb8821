"""ModelConfig parsing, RoPE frequencies, and loading HF-written checkpoints (sharded, tied, biased),
plus the clear errors bad checkpoints must produce."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from radixlm.runtime.model.architectures import SUPPORTED_ARCHITECTURES
from radixlm.runtime.model.attention import rope_inv_freq
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.model_loader import load_model, resolve_dtype
from radixlm.runtime.scheduler.batch import BatchSpec
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

SMALL = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def write_llama(path, max_shard_size: str | None = None, **overrides) -> LlamaForCausalLM:
    """Save a tiny HF Llama (random weights, non-trivial norms and biases) and return it."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{**SMALL, **overrides})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.8, 1.2)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.3)
            else:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(path, safe_serialization=True, **kwargs)
    return model


def prefill_logits(model, ids: list[int]) -> torch.Tensor:
    c = model.config
    pool = KVPool(64, c.num_layers, c.num_kv_heads, c.head_dim, model.norm.weight.dtype, "cpu")
    spec = BatchSpec(False, [0], ids, [0], [len(ids)], list(range(1, len(ids) + 1)), list(range(len(ids))))
    return model.forward(ForwardBatch.from_spec(spec, ReqToTokenTable(1, 64, "cpu"), "cpu"), pool)


def hf_logits(ref, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return ref(torch.tensor([ids])).logits[0]


IDS = [3, 17, 99, 4, 56, 120, 7, 7, 31, 88, 2, 64]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    write_llama(path)
    return path


def broken_copy(src, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


# --- config -------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "qwen3"])
def test_config_of_our_checkpoints(checkpoint, arch):
    c = ModelConfig.from_path(checkpoint(arch, "tiny"))
    assert c.architecture in SUPPORTED_ARCHITECTURES and c.num_heads % c.num_kv_heads == 0
    assert c.qkv_bias == (arch == "qwen2") and c.qk_norm == (arch == "qwen3")
    assert c.o_bias is False and c.rope_scaling is None and c.torch_dtype == "float32"
    if arch == "qwen3":
        assert c.head_dim * c.num_heads != c.hidden_size


def test_config_transformers5_layout(tmp_path):
    LlamaConfig(**SMALL, rope_scaling=dict(LLAMA3), rope_theta=500000.0, dtype="bfloat16").save_pretrained(tmp_path)
    assert "rope_parameters" in json.loads((tmp_path / "config.json").read_text())
    c = ModelConfig.from_path(tmp_path)
    assert c.rope_theta == 500000.0 and c.rope_scaling == LLAMA3
    assert (c.head_dim, c.num_kv_heads, c.torch_dtype, c.context_len) == (16, 2, "bfloat16", 2048)


def test_config_transformers4_layout():
    raw = {"architectures": ["MistralForCausalLM"], **SMALL, "max_position_embeddings": 4096,
           "rope_theta": 1e6, "rope_scaling": {"type": "linear", "factor": 2.0}, "torch_dtype": "float16",
           "sliding_window": 1024}
    c = ModelConfig.from_dict(raw)
    assert c.rope_theta == 1e6 and c.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    assert c.torch_dtype == "float16"
    # a sliding window shorter than the context clamps context_len (exact within the window)
    assert (c.sliding_window, c.context_len) == (1024, 1024)
    qwen = ModelConfig.from_dict({**raw, "architectures": ["Qwen2ForCausalLM"], "use_sliding_window": False})
    assert (qwen.sliding_window, qwen.context_len, qwen.qkv_bias, qwen.o_bias) == (None, 4096, True, False)


@pytest.mark.parametrize("scaling, match", [
    ({"rope_type": "yarn", "factor": 4.0}, "'yarn' is not supported; supported: default, linear, llama3"),
    ({"type": "dynamic", "factor": 2.0}, "'dynamic' is not supported"),
    ({"rope_type": "llama3", "factor": 8.0}, "missing 'low_freq_factor'"),
    ({"rope_type": "linear"}, "missing 'factor'"),
])
def test_config_rejects_unsupported_rope(scaling, match):
    raw = {"architectures": ["LlamaForCausalLM"], **SMALL, "max_position_embeddings": 128, "rope_scaling": scaling}
    with pytest.raises(ValueError, match=match):
        ModelConfig.from_dict(raw)


@pytest.mark.parametrize("change, match", [
    ({"architectures": ["GPT2LMHeadModel"]}, "unsupported architecture GPT2LMHeadModel; supported: LlamaForCausalLM"),
    ({"architectures": None, "model_type": "gpt2"}, r"unsupported architecture none \(model_type='gpt2'\)"),
    ({"hidden_size": None}, "missing required field 'hidden_size'"),
    ({"num_key_value_heads": 3}, "num_key_value_heads"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
])
def test_config_errors(change, match):
    raw = {"architectures": ["LlamaForCausalLM"], **SMALL, "max_position_embeddings": 128, **change}
    with pytest.raises(ValueError, match=match):
        ModelConfig.from_dict(raw)


@pytest.mark.parametrize("scaling", [None, {"rope_type": "linear", "factor": 4.0}, LLAMA3])
def test_rope_inv_freq_matches_transformers(scaling):
    hf_config = LlamaConfig(**SMALL, rope_scaling=dict(scaling) if scaling else None, max_position_embeddings=512)
    expected = LlamaRotaryEmbedding(hf_config).inv_freq
    c = ModelConfig.from_dict(hf_config.to_dict())
    torch.testing.assert_close(rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling), expected, rtol=1e-6, atol=0)


# --- loading -------------------------------------------------------------------------------------


def test_fused_weights_copied_from_checkpoint(llama_dir):
    model, config = load_model(llama_dir, "float32", "cpu")
    weights = load_file(str(llama_dir / "model.safetensors"))
    p = "model.layers.1."
    qkv = torch.cat([weights[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])
    gate_up = torch.cat([weights[p + "mlp.gate_proj.weight"], weights[p + "mlp.up_proj.weight"]])
    assert torch.equal(model.layers[1].qkv_proj.weight, qkv)
    assert torch.equal(model.layers[1].gate_up_proj.weight, gate_up)
    assert torch.equal(model.lm_head, weights["lm_head.weight"])


def test_sharded_checkpoint_loads_like_single_file(tmp_path, llama_dir):
    write_llama(tmp_path, max_shard_size="40KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    sharded, _ = load_model(tmp_path, "float32", "cpu")
    single, _ = load_model(llama_dir, "float32", "cpu")
    for (name, a), (_, b) in zip(sharded.named_parameters(), single.named_parameters()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("overrides", [
    {"tie_word_embeddings": True},
    {"attention_bias": True, "mlp_bias": True},
    {"rope_scaling": dict(LLAMA3), "head_dim": 32},
])
def test_hf_written_variants_match_transformers(tmp_path, overrides):
    ref = write_llama(tmp_path, **overrides)
    model, config = load_model(tmp_path, "float32", "cpu", attention_backend="torch")
    if overrides.get("tie_word_embeddings"):
        assert model.lm_head is None and "lm_head.weight" not in load_file(str(tmp_path / "model.safetensors"))
    diff = (prefill_logits(model, IDS) - hf_logits(ref, IDS)).abs().max().item()
    assert diff <= 1e-4


def test_dtype_override_and_default(llama_dir):
    model, _ = load_model(llama_dir, "bfloat16", "cpu")
    assert model.layers[0].qkv_proj.weight.dtype == torch.bfloat16
    logits = prefill_logits(model, IDS)
    assert logits.dtype == torch.float32
    reference = prefill_logits(load_model(llama_dir)[0], IDS)  # default on CPU: float32
    assert (logits - reference).abs().max().item() < 0.1 * reference.abs().max().item()


@pytest.mark.parametrize("dtype, device, ckpt, expected", [
    (None, "cpu", "bfloat16", torch.float32),
    ("auto", "cpu", None, torch.float32),
    ("auto", "cuda", "float32", torch.bfloat16),
    ("auto", "cuda", "float16", torch.float16),
    ("auto", "cuda", None, torch.bfloat16),
    ("float16", "cpu", "bfloat16", torch.float16),
    (torch.bfloat16, "cpu", None, torch.bfloat16),
])
def test_resolve_dtype(dtype, device, ckpt, expected):
    assert resolve_dtype(dtype, device, ckpt) == expected


def test_resolve_dtype_rejects_unknown():
    with pytest.raises(ValueError, match="dtype 'int8'"):
        resolve_dtype("int8", "cpu")
    with pytest.raises(ValueError, match="dtype torch.int8"):
        resolve_dtype(torch.int8, "cpu")


def test_inv_freq_buffers_are_ignored(tmp_path, llama_dir):
    path = broken_copy(llama_dir, tmp_path)
    weights = load_file(str(path / "model.safetensors"))
    weights["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    save_file(weights, str(path / "model.safetensors"))
    load_model(path, "float32", "cpu")


# --- bad checkpoints -----------------------------------------------------------------------------


def test_missing_directory_and_files(tmp_path, llama_dir):
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        load_model(tmp_path / "nope")
    path = broken_copy(llama_dir, tmp_path)
    (path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors or model.safetensors.index.json"):
        load_model(path)
    (path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(path)


def test_missing_shard_named(tmp_path):
    write_llama(tmp_path, max_shard_size="40KB")
    shard = sorted(tmp_path.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(FileNotFoundError, match=shard.name):
        load_model(tmp_path)


def test_unsupported_architecture_named(tmp_path, llama_dir):
    path = broken_copy(llama_dir, tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["PhiForCausalLM"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="PhiForCausalLM.*Qwen3ForCausalLM"):
        load_model(path)


def _edit_weights(path, edit) -> None:
    weights = load_file(str(path / "model.safetensors"))
    edit(weights)
    save_file(weights, str(path / "model.safetensors"))


def test_shape_mismatch_names_tensor_and_shapes(tmp_path, llama_dir):
    path = broken_copy(llama_dir, tmp_path)
    _edit_weights(path, lambda w: w.update({"model.layers.1.self_attn.k_proj.weight": torch.zeros(16, 64)}))
    with pytest.raises(ValueError, match=r"'model.layers.1.self_attn.k_proj.weight'.*\[16, 64\].*\[32, 64\]"):
        load_model(path)


def test_missing_tensor_named(tmp_path, llama_dir):
    path = broken_copy(llama_dir, tmp_path)
    _edit_weights(path, lambda w: w.pop("model.layers.0.mlp.up_proj.weight"))
    with pytest.raises(ValueError, match="missing tensor.*model.layers.0.mlp.up_proj.weight"):
        load_model(path)


def test_unexpected_tensor_named(tmp_path, llama_dir):
    path = broken_copy(llama_dir, tmp_path)
    _edit_weights(path, lambda w: w.update({"model.layers.2.input_layernorm.weight": torch.ones(64)}))
    with pytest.raises(ValueError, match="unexpected tensor 'model.layers.2.input_layernorm.weight'"):
        load_model(path)
