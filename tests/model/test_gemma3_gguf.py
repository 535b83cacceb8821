"""Gemma 3 from a GGUF file: llama.cpp's names and norm convention (``w + 1``), its metadata, blocks.

A tiny Gemma 3 (six layers: llama.cpp's fixed pattern makes the sixth global; window 8) written by
transformers is converted as llama.cpp's converter writes a ``gemma3`` file, with Q8_0 / Q4_0 / F16
tensors (``tests/gemma3_checkpoint.py``). Its twin is the HF checkpoint of the same weights
dequantized to float32. As for the other GGUF architectures (``test_gguf_loading.py``), the block
kernels round activations to 8-bit blocks, so logits agree within ``LOGIT_MAX_REL`` of the largest,
and the top-1 wherever the twin's top-1/top-2 gap exceeds twice the measured error.
"""

from __future__ import annotations

import pytest
import torch
from gemma3_checkpoint import write_gemma3_checkpoint, write_gemma3_dequantized, write_gemma3_gguf
from gguf import GGMLQuantizationType as T
from radixlm.runtime.model.block_linear import BlockEmbedding, BlockLinear, BlockLMHead
from radixlm.runtime.model.gemma3 import Gemma3ForCausalLM
from radixlm.runtime.model.model_loader import load_model
from radixlm.runtime.tokenizer.tokenizer import Tokenizer
from test_forward_vs_transformers import Paged

LOGIT_MAX_REL = 0.04
AGREEMENT_FLOOR = 0.9
QTYPES = {"embed_tokens.weight": T.Q8_0, "q_proj.weight": T.Q8_0, "k_proj.weight": T.Q8_0,
          "v_proj.weight": T.Q4_0, "o_proj.weight": T.Q8_0, "gate_proj.weight": T.Q8_0,
          "up_proj.weight": T.Q4_0, "down_proj.weight": T.F16}
SIX_LAYERS = {"num_hidden_layers": 6, "layer_types": None, "query_pre_attn_scalar": 32}  # scalar = key_length
PROMPTS = ["The keeper climbed the stairs of the old lighthouse and looked out over the dark water",
           "Once upon a time, in a village by the sea, there lived an old fisherman and his daughter"]


@pytest.fixture(scope="module")
def twins(tmp_path_factory, tiny_llama):
    root = tmp_path_factory.mktemp("gemma3-gguf")
    src = write_gemma3_checkpoint(root / "hf", SIX_LAYERS, tokenizer_from=tiny_llama)
    return str(write_gemma3_gguf(src, root / "model.gguf", QTYPES)), str(
        write_gemma3_dequantized(src, root / "float", QTYPES))


def test_config_and_weights_from_the_file(twins):
    gguf, float_dir = twins
    model, config = load_model(gguf)
    ref, ref_config = load_model(float_dir, "float32")
    assert isinstance(model, Gemma3ForCausalLM) and config.architecture == "Gemma3ForCausalLM"
    for field in ("layer_types", "sliding_window", "head_dim", "attention_scale", "rope_theta",
                  "local_rope_theta", "hidden_act", "tie_word_embeddings", "num_kv_heads", "vocab_size"):
        assert getattr(config, field) == getattr(ref_config, field), field
    assert config.layer_types[-1] == "full_attention" and config.layer_types.count("full_attention") == 1
    layer, ref_layer = model.layers[0], ref.layers[0]
    assert isinstance(layer.qkv_proj, BlockLinear) and isinstance(model.quantized_embedding, BlockEmbedding)
    assert isinstance(model.quantized_lm_head, BlockLMHead)  # tied: the embedding's blocks
    for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm", "q_norm", "k_norm"):  # stored as w + 1, read back as w
        torch.testing.assert_close(getattr(layer, name).weight, getattr(ref_layer, name).weight, rtol=0, atol=1e-6)


def test_logits_match_the_dequantized_float32_model(twins):
    gguf, float_dir = twins
    model, _ = load_model(gguf)
    ref, _ = load_model(float_dir, "float32")
    tok = Tokenizer(float_dir)
    agree = total = 0
    for text in PROMPTS:
        ids = tok.encode(text)
        assert len(ids) > 2 * model.config.sliding_window
        a, b = Paged(model).run([0], [0], [ids]), Paged(ref).run([0], [0], [ids])
        err = (a - b).abs().max().item()
        assert err <= LOGIT_MAX_REL * b.abs().max().item(), (text, err)
        top2 = b.topk(2, dim=-1).values
        wide = (top2[:, 0] - top2[:, 1]) > 2 * err
        assert (a.argmax(-1) == b.argmax(-1))[wide].all()
        agree += int((a.argmax(-1) == b.argmax(-1)).sum())
        total += a.shape[0]
    assert agree / total >= AGREEMENT_FLOOR
