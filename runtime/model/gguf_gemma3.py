"""Gemma 3 in a GGUF file (``general.architecture`` = ``gemma3``): its tensor names and config fields.

llama.cpp's converter (``convert_hf_to_gguf.py``, ``Gemma3Model``) stores every RMSNorm weight as
``w + 1`` (ggml's norm multiplies by the weight alone), so the loader subtracts ``NORM_OFFSET`` to get
transformers' ``w`` back (``GemmaRMSNorm`` multiplies by ``1 + w``); transformers' GGUF reader does
the same. The file names the layer norms after their place: ``attn_norm`` (input),
``post_attention_norm``, ``ffn_norm`` (pre-feedforward), ``post_ffw_norm``.

Metadata llama.cpp does not write and hard-codes for ``gemma3``, as this module does: the local
(sliding-layer) RoPE base 10000, every 6th layer global, and the attention scale
``query_pre_attn_scalar ** -0.5`` with ``query_pre_attn_scalar`` = ``key_length``, except for the
27B model (62 layers), whose scalar is ``hidden / heads``.
"""

from __future__ import annotations

from typing import Any

NORM_OFFSET = 1.0
LOCAL_ROPE_BASE = 10_000.0
SLIDING_PATTERN = 6
_GEMMA3_27B_LAYERS = 62

# GGUF metadata key (after ``gemma3.``) -> config field, when the file has it
METADATA_FIELDS = {"final_logit_softcapping": "final_logit_softcapping",
                   "rope.local.freq_base": "rope_local_base_freq"}

# GGUF layer tensor suffix -> HF suffix, where Gemma 3 differs from (or adds to) the llama names
LAYER_TENSORS = {
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}


def gemma3_fields(metadata: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The computed ``config.json`` fields of a ``gemma3`` file (``config``: the fields read so far)."""
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    scalar = config["hidden_size"] // heads if layers == _GEMMA3_27B_LAYERS else config["head_dim"]
    return {
        "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": scalar,
        "rope_local_base_freq": float(config.get("rope_local_base_freq", LOCAL_ROPE_BASE)),
        "layer_types": _layer_types(metadata.get("gemma3.attention.sliding_window_pattern"), layers),
    }


def _layer_types(pattern: Any, layers: int) -> list[str]:
    """``sliding_window_pattern``: absent (every 6th layer global), an int, or one bool per layer."""
    if pattern is None or not hasattr(pattern, "__len__"):  # a scalar (numpy's included)
        every = int(pattern or SLIDING_PATTERN)
        return ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)]
    flags = [bool(x) for x in pattern]
    if len(flags) != layers:
        raise ValueError(f"GGUF gemma3.attention.sliding_window_pattern has {len(flags)} entries for {layers} layers")
    return ["sliding_attention" if sliding else "full_attention" for sliding in flags]
