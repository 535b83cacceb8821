"""``runtime/model/architectures.py``: one table maps an architecture name (HF or GGUF) to its config
reader, model class and weight-name maps, and nothing else in ``runtime/model/`` names a family."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from radixlm.runtime.model import architectures
from radixlm.runtime.model.architectures import (
    ARCHITECTURES,
    SUPPORTED_ARCHITECTURES,
    architecture,
    config_architecture,
    gguf_architecture,
)
from radixlm.runtime.model.gemma3 import Gemma3ForCausalLM
from radixlm.runtime.model.llama import LlamaForCausalLM
from radixlm.runtime.model.model_config import ModelConfig

MODEL_DIR = Path(architectures.__file__).parent
LLAMA_FIELDS = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512,
                "attention_bias": True, "mlp_bias": True}

# architecture -> (qkv_bias, o_bias, mlp_bias, qk_norm) of LLAMA_FIELDS, as each HF class builds them
LLAMA_FLAGS = {"LlamaForCausalLM": (True, True, True, False), "MistralForCausalLM": (False, False, False, False),
               "Qwen2ForCausalLM": (True, False, False, False), "Qwen3ForCausalLM": (True, True, False, True)}


@pytest.mark.parametrize("name", sorted(LLAMA_FLAGS))
def test_llama_family_rows_read_their_bias_rules(name):
    config = ModelConfig.from_dict({"architectures": [name], **LLAMA_FIELDS})
    assert config.architecture == name
    assert (config.qkv_bias, config.o_bias, config.mlp_bias, config.qk_norm) == LLAMA_FLAGS[name]
    assert architecture(name).model_class is LlamaForCausalLM


@pytest.mark.parametrize("row", ARCHITECTURES, ids=lambda row: row.name)
def test_a_config_without_architectures_is_found_by_model_type(row):
    assert config_architecture({"model_type": row.model_type}) is row


def test_gemma3_rows_share_the_model_class_and_the_multimodal_one_renames_tensors():
    text, multimodal = architecture("Gemma3ForCausalLM"), architecture("Gemma3ForConditionalGeneration")
    assert text.model_class is multimodal.model_class is Gemma3ForCausalLM
    assert text.tensor_name("model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"
    assert multimodal.tensor_name("language_model.model.norm.weight") == "model.norm.weight"
    assert multimodal.tensor_name("vision_tower.encoder.weight") is None
    config = ModelConfig.from_dict({"architectures": ["Gemma3ForConditionalGeneration"],
                                    "text_config": {"num_hidden_layers": 2}})
    assert config.architecture == "Gemma3ForConditionalGeneration" and config.num_layers == 2


def test_gguf_names_map_to_rows_and_their_tensor_names():
    assert gguf_architecture("qwen2").name == "Qwen2ForCausalLM"
    assert gguf_architecture("llama").gguf.permuted_qk and not gguf_architecture("qwen2").gguf.permuted_qk
    gemma = gguf_architecture("gemma3").gguf
    assert gemma.hf_name("blk.3.ffn_norm.weight") == "model.layers.3.pre_feedforward_layernorm.weight"
    assert gguf_architecture("llama").gguf.hf_name("blk.3.ffn_norm.weight") == \
        "model.layers.3.post_attention_layernorm.weight"
    assert gguf_architecture("qwen3").gguf.hf_name("blk.0.attn_q_norm.weight") == "model.layers.0.self_attn.q_norm.weight"
    assert gemma.norm_offset == 1.0 and gguf_architecture("qwen3").gguf.norm_offset == 0.0


def test_unsupported_names_raise_naming_the_choices():
    with pytest.raises(ValueError, match="unsupported architecture PhiForCausalLM; supported: LlamaForCausalLM"):
        ModelConfig.from_dict({"architectures": ["PhiForCausalLM"], **LLAMA_FIELDS})
    with pytest.raises(ValueError, match="GGUF architecture 'phi3' is not supported; supported: llama"):
        gguf_architecture("phi3")
    assert SUPPORTED_ARCHITECTURES == tuple(row.name for row in ARCHITECTURES)


def _string_constants(path: Path) -> set[str]:
    """The string literals of a module, its ``__all__`` aside."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exported = {id(c) for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                for c in ast.walk(node)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in exported}


def test_no_other_model_module_dispatches_on_a_family_name():
    """The table is the one place: no other module of ``runtime/model/`` spells an architecture's
    HF name, ``model_type`` or GGUF name as a string."""
    names = {row.name for row in ARCHITECTURES} | {row.model_type for row in ARCHITECTURES} | \
        {row.gguf.name for row in ARCHITECTURES if row.gguf is not None}
    found = [f"{path.name}: {name}" for path in MODEL_DIR.rglob("*.py") if path.name != "architectures.py"
             for name in sorted(names & _string_constants(path))]
    assert not found, found
