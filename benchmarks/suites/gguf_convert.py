"""Convert a Llama-family or Qwen2 HF checkpoint (float32 or bfloat16 safetensors, byte-level BPE
``tokenizer.json``) to a float32 GGUF.

Only what ``llama.cpp`` needs to run the locally built checkpoints: hyper-parameters, the BPE
vocabulary and merges (tokenizer model ``gpt2``), special token ids, and the tensors renamed to GGUF's
names. llama.cpp's ``llama`` architecture applies RoPE to adjacent pairs (``rope_type`` normal) while
HF Llama rotates halves, so the Q and K projections are permuted per head (as llama.cpp's own
converter does); an untied LM head is written as ``output.weight`` (a tied one is copied from the
embedding). Qwen2 (the real-shape Qwen2.5-0.5B) is written as llama.cpp's ``qwen2`` architecture:
q/k/v biases as ``attn_{q,k,v}.bias``, no permutation (its RoPE rotates halves, as HF does).
Verified on the tiny Llama checkpoint: llama.cpp's greedy tokens equal radixlm's for the
same token ids (the agent suite records this agreement in every run).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

LAYER_NAMES = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
}
ARCHS = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2"}  # HF model_type -> GGUF architecture
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}


def _permute_rope(w: np.ndarray, heads: int) -> np.ndarray:
    # [heads * head_dim, hidden]: halves of each head -> interleaved pairs
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf_name: str) -> str:
    """The GGUF tensor name of an HF Llama tensor name (``ValueError`` for an unknown one)."""
    if hf_name in TOP_NAMES:
        return TOP_NAMES[hf_name]
    parts = hf_name.split(".", 3)  # model, layers, N, rest
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in LAYER_NAMES:
        return f"blk.{parts[2]}.{LAYER_NAMES[parts[3]]}"
    raise ValueError(f"tensor {hf_name!r} has no GGUF name (only Llama-style checkpoints convert)")


def _token_type(known: bool, added: dict | None) -> int:
    # GGUF token types: 1 normal, 3 control (special added tokens), 4 user-defined (added, not special,
    # e.g. <tool_call>: kept in decoded text), 5 unused (ids the vocabulary does not fill)
    if not known:
        return 5
    if added is None:
        return 1
    return 3 if added.get("special") else 4


def _add_tokenizer(writer, model_dir: Path, config: dict) -> None:
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    vocab: dict[str, int] = dict(tok["model"]["vocab"])
    added = {t["content"]: t for t in tok.get("added_tokens", [])}
    vocab.update({content: t["id"] for content, t in added.items()})
    size = config["vocab_size"]
    by_id = {i: t for t, i in vocab.items()}
    tokens = [by_id.get(i, f"<|unused_{i}|>") for i in range(size)]
    types = [_token_type(i in by_id, added.get(t)) for i, t in enumerate(tokens)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"].get("merges", [])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    if config.get("bos_token_id") is not None:
        writer.add_bos_token_id(config["bos_token_id"])
    eos = config.get("eos_token_id")
    if eos is not None:
        writer.add_eos_token_id(eos[0] if isinstance(eos, list) else eos)
    tok_config = model_dir / "tokenizer_config.json"
    bos = json.loads(tok_config.read_text()).get("bos_token", True) if tok_config.is_file() else True
    writer.add_add_bos_token(config.get("bos_token_id") is not None and bos is not None)  # Qwen: no BOS


def _load_float32(model_dir: Path) -> dict[str, np.ndarray]:
    """Every safetensors tensor of ``model_dir`` as float32 (bfloat16 ones through torch: numpy has none)."""
    from safetensors import safe_open

    tensors: dict[str, np.ndarray] = {}
    for shard in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            for name in f.keys():
                tensors[name] = f.get_tensor(name).float().numpy()
    return tensors


def convert(model_dir: str | Path, out_path: str | Path) -> Path:
    """Write ``out_path`` (a float32 GGUF) from the HF checkpoint in ``model_dir``; returns the path."""
    import gguf

    model_dir, out_path = Path(model_dir), Path(out_path)
    config = json.loads((model_dir / "config.json").read_text())
    arch = ARCHS.get(config.get("model_type"))
    if arch is None:
        raise ValueError(f"model_type {config.get('model_type')!r}: only {'/'.join(ARCHS)} checkpoints convert")
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    writer = gguf.GGUFWriter(str(out_path), arch)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(config.get("head_dim", config["hidden_size"] // heads))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config.get("rope_theta", 10000.0))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(writer, model_dir, config)
    tensors = _load_float32(model_dir)
    if "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    for name, w in tensors.items():
        if arch == "llama" and name.endswith("q_proj.weight"):
            w = _permute_rope(w, heads)
        elif arch == "llama" and name.endswith("k_proj.weight"):
            w = _permute_rope(w, kv_heads)
        writer.add_tensor(gguf_name(name), np.ascontiguousarray(w))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_path
