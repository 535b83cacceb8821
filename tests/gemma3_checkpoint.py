"""Tiny Gemma 3 text checkpoints written by transformers, for the model and engine tests.

Two sliding layers with a window of ``WINDOW`` around one global layer, ``head_dim * heads !=
hidden``, random norm weights (Gemma scales by ``1 + w``): prompts longer than the window make both
RoPE bases, the window mask and the sandwich norms all move the logits.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

WINDOW = 8
TINY = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "query_pre_attn_scalar": 24,
        "sliding_window": WINDOW, "max_position_embeddings": 256,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def write_gemma3_checkpoint(path: str | Path, extra: dict | None = None, seed: int = 0,
                            tokenizer_from: str | Path | None = None) -> Path:
    """Save a tiny ``Gemma3ForCausalLM`` (``TINY`` updated by ``extra``) at ``path``; with
    ``tokenizer_from`` (a synthetic checkpoint), its tokenizer files and vocabulary size too."""
    extra = dict(extra or {})
    if tokenizer_from is not None:
        source = json.loads((Path(tokenizer_from) / "config.json").read_text())
        extra.setdefault("vocab_size", source["vocab_size"])
    config = Gemma3TextConfig(**{**TINY, **extra})
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(-0.3, 0.3)  # the scale is 1 + w
            elif "embed_tokens" in name:
                p.normal_(0.0, 0.3)  # times sqrt(hidden) = 8 on lookup
            else:
                p.normal_(0.0, 1.5 / p.shape[1] ** 0.5)
    model.save_pretrained(path, safe_serialization=True)
    if tokenizer_from is not None:
        for name in TOKENIZER_FILES:
            shutil.copy(Path(tokenizer_from) / name, Path(path) / name)
    return Path(path)


# HF layer tensor suffix -> llama.cpp's gemma3 name
GGUF_LAYER_NAMES = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight", "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def write_gemma3_gguf(model_dir: str | Path, out: str | Path, qtypes: dict) -> Path:
    """``out``: the checkpoint in ``model_dir`` as llama.cpp's converter writes a ``gemma3`` file (norm
    weights stored as ``w + 1``, no layer pattern: every 6th layer global), the tensors whose HF name
    ends with a key of ``qtypes`` quantized to its block type."""
    import gguf
    import numpy as np
    from gguf_files import _qtype, _quantize
    from suites.gguf_convert import _add_tokenizer, _load_float32

    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    writer = gguf.GGUFWriter(str(out), "gemma3")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_parameters"]["full_attention"]["rope_theta"])
    writer.add_sliding_window(config["sliding_window"])
    _add_tokenizer(writer, model_dir, config)
    for name, w in _load_float32(model_dir).items():
        if name.endswith("norm.weight"):
            w = w + 1.0
        if name == "model.embed_tokens.weight":
            gguf_name = "token_embd.weight"
        elif name == "model.norm.weight":
            gguf_name = "output_norm.weight"
        else:
            layer, suffix = name.removeprefix("model.layers.").split(".", 1)
            gguf_name = f"blk.{layer}.{GGUF_LAYER_NAMES[suffix]}"
        qtype = _qtype(name, qtypes)
        if qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(gguf_name, np.ascontiguousarray(w))
        else:
            writer.add_tensor(gguf_name, _quantize(w, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(out)


def write_gemma3_dequantized(model_dir: str | Path, out_dir: str | Path, qtypes: dict) -> Path:
    """The HF checkpoint of the model ``write_gemma3_gguf(model_dir, ..., qtypes)`` describes."""
    import numpy as np
    from gguf_files import _qtype, _round_trip
    from safetensors.torch import save_file
    from suites.gguf_convert import _load_float32

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", *TOKENIZER_FILES):
        shutil.copy(model_dir / name, out_dir / name)
    weights = {name: torch.from_numpy(np.ascontiguousarray(_round_trip(w, _qtype(name, qtypes))))
               for name, w in _load_float32(model_dir).items()}
    save_file(weights, str(out_dir / "model.safetensors"))
    return out_dir
