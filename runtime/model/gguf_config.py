"""A GGUF file's architecture: its metadata as a ``ModelConfig`` and its tensor names as HF names (no torch).

``GGUF_ARCHITECTURES`` is the registry: one ``GGUFArchitecture`` per ``general.architecture`` value
we serve. Each entry names the HF architecture whose model class runs it, whether llama.cpp's
converter permuted the Q/K rows (``convert_hf_to_gguf`` does for ``llama``, so that ggml's RoPE can
rotate adjacent pairs; the loader undoes it), and the tensor names it adds to the common ones.
Adding an architecture is one entry here (plus its model class, if ours has none).

The metadata is mapped to an HF ``config.json`` dict and built by ``ModelConfig.from_dict``, so a
GGUF model gets the same checks (and the same per-architecture bias flags) as an HF checkpoint.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf import quants
from radixlm.runtime.model import gguf_gemma3 as gemma3
from radixlm.runtime.model.gguf_reader import GGUFFile, StringArray
from radixlm.runtime.model.model_config import ModelConfig

# GGUF name -> HF name, for every llama-family file
TOP_TENSORS = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
               "output.weight": "lm_head.weight"}
LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias", "attn_output.bias": "self_attn.o_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
ROPE_FREQS = "rope_freqs.weight"
MAX_SIZE = 1 << 24  # the largest hidden size, head count, layer count or context a file may state  # Llama 3.1 rope scaling, as per-frequency divisors
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(.+)")


@dataclass(frozen=True)
class GGUFArchitecture:
    """How one ``general.architecture`` maps onto our models.

    ``permuted_qk``: Q/K weight (and bias) rows were permuted per head by the converter.
    ``extra_layer_tensors``: GGUF layer tensor suffix -> HF suffix, beyond (or instead of) ``LAYER_TENSORS``.
    ``extra_config``: GGUF metadata key (after ``<arch>.``) -> HF config field, beyond the common ones
    (``hf_config``); a key the file lacks is left out.
    ``config_fields``: ``(metadata, config) -> fields`` computed fields this architecture adds.
    ``norm_offset``: the converter stored every norm weight plus this (Gemma's ``1 + w``); subtracted.
    """

    hf_architecture: str
    model_type: str
    permuted_qk: bool = False
    extra_layer_tensors: dict[str, str] = field(default_factory=dict)
    extra_config: dict[str, str] = field(default_factory=dict)
    config_fields: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    norm_offset: float = 0.0

    def hf_name(self, gguf_name: str) -> str | None:
        """The HF tensor name of ``gguf_name``, or None when this architecture has no such tensor."""
        if gguf_name in TOP_TENSORS:
            return TOP_TENSORS[gguf_name]
        match = _LAYER_NAME.fullmatch(gguf_name)
        if match is None:
            return None
        suffix = self.extra_layer_tensors.get(match[2]) or LAYER_TENSORS.get(match[2])
        return None if suffix is None else f"model.layers.{match[1]}.{suffix}"


GGUF_ARCHITECTURES: dict[str, GGUFArchitecture] = {
    "llama": GGUFArchitecture("LlamaForCausalLM", "llama", permuted_qk=True),
    "mistral": GGUFArchitecture("MistralForCausalLM", "mistral", permuted_qk=True),
    "qwen2": GGUFArchitecture("Qwen2ForCausalLM", "qwen2"),
    "qwen3": GGUFArchitecture("Qwen3ForCausalLM", "qwen3", extra_layer_tensors={
        "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}),
    "gemma3": GGUFArchitecture("Gemma3ForCausalLM", "gemma3_text", extra_layer_tensors=gemma3.LAYER_TENSORS,
                               norm_offset=gemma3.NORM_OFFSET, extra_config=gemma3.METADATA_FIELDS,
                               config_fields=gemma3.gemma3_fields),
}


def gguf_architecture(name: str) -> GGUFArchitecture:
    """The registry entry for ``general.architecture`` ``name``; ``ValueError`` naming it if unsupported."""
    if name not in GGUF_ARCHITECTURES:
        raise ValueError(f"GGUF architecture {name!r} is not supported; supported: {', '.join(GGUF_ARCHITECTURES)}")
    return GGUF_ARCHITECTURES[name]


def field_value(reader: GGUFFile, key: str, default: Any = None) -> Any:
    """A metadata value of ``reader`` (a scalar, a string or an array), or ``default``."""
    return reader.metadata.get(key, default)


def _fail(reader: GGUFFile, key: str, problem: str) -> ValueError:
    return ValueError(f"{reader.path}: {key}: {problem}")


def _required(reader: GGUFFile, key: str) -> Any:
    value = field_value(reader, key)
    if value is None:
        raise _fail(reader, key, "missing from the GGUF metadata")
    return value


def _size(reader: GGUFFile, key: str, default: Any = None, *, low: int = 1) -> int:
    """An integer field (``default`` when absent) in ``[low, MAX_SIZE]``, else ``ValueError`` naming it."""
    value = _required(reader, key) if default is None else field_value(reader, key, default)
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(reader, key, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= MAX_SIZE:
        raise _fail(reader, key, f"{value} is outside {low}..{MAX_SIZE}")
    return value


def _number(reader: GGUFFile, key: str, default: float | None = None) -> float:
    value = _required(reader, key) if default is None else field_value(reader, key, default)
    if isinstance(value, (bool, str, list, np.ndarray, StringArray)) or not np.isfinite(value):
        raise _fail(reader, key, f"must be a finite number, got {value!r:.40}")
    return float(value)


def _rope_scaling(reader: GGUFFile, arch: str, rope_freqs: list[float] | None) -> dict[str, Any] | None:
    kind = field_value(reader, f"{arch}.rope.scaling.type", "none")
    if rope_freqs is not None:
        return {"rope_type": "freq_factors", "factors": tuple(rope_freqs)}
    if kind in ("none", None):
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": float(_required(reader, f"{arch}.rope.scaling.factor"))}
    raise ValueError(f"GGUF rope scaling {kind!r} ({arch}.rope.scaling.type) is not supported; supported: "
                     "none, linear, rope_freqs")


def _kv_heads_and_head_dim(reader: GGUFFile, arch: str, heads: int, hidden: int) -> tuple[int, int]:
    p = f"{arch}."
    key = p + "attention.head_count_kv"
    counts = field_value(reader, key)
    if isinstance(counts, np.ndarray):  # per-layer counts: ours are uniform
        if counts.size == 0 or len(set(counts.tolist())) != 1:
            raise _fail(reader, key, f"differs between layers ({sorted(set(counts.tolist()))})")
        reader.metadata[key] = counts[0]
    kv_heads = _size(reader, key, heads)
    head_dim = _size(reader, p + "attention.key_length", max(hidden // heads, 1))
    value_dim = _size(reader, p + "attention.value_length", head_dim)
    rope_dim = _size(reader, p + "rope.dimension_count", head_dim)
    if value_dim != head_dim or rope_dim != head_dim:
        raise ValueError(f"{reader.path}: {arch}: key_length {head_dim}, value_length {value_dim} and "
                         f"rope.dimension_count {rope_dim} must be equal (partial RoPE is not supported)")
    return kv_heads, head_dim


def hf_config(reader: GGUFFile) -> dict[str, Any]:
    """The HF ``config.json`` dict a GGUF file's metadata describes."""
    tensors = reader.tensors
    arch_name = str(_required(reader, "general.architecture"))
    spec = gguf_architecture(arch_name)
    p = f"{arch_name}."
    heads = _size(reader, p + "attention.head_count")
    hidden = _size(reader, p + "embedding_length")
    kv_heads, head_dim = _kv_heads_and_head_dim(reader, arch_name, heads, hidden)
    embed = tensors.get("token_embd.weight")
    if embed is None:
        raise _fail(reader, "token_embd.weight", "the file has no such tensor")
    rope_freqs = tensors.get(ROPE_FREQS)
    freqs = None if rope_freqs is None else quants.dequantize(rope_freqs.data, rope_freqs.qtype).reshape(-1).tolist()
    config = {
        "architectures": [spec.hf_architecture], "model_type": spec.model_type,
        "hidden_size": hidden, "num_hidden_layers": _size(reader, p + "block_count"),
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
        "intermediate_size": _size(reader, p + "feed_forward_length"),
        "rms_norm_eps": _number(reader, p + "attention.layer_norm_rms_epsilon"),
        "rope_theta": _number(reader, p + "rope.freq_base", 10000.0),
        "max_position_embeddings": _size(reader, p + "context_length"),
        "vocab_size": int(embed.shape[0]),  # [vocab, hidden]
        "tie_word_embeddings": "output.weight" not in tensors,
        "attention_bias": "blk.0.attn_q.bias" in tensors, "hidden_act": "silu",
    }
    if field_value(reader, p + "attention.sliding_window") is not None:
        config["sliding_window"] = _size(reader, p + "attention.sliding_window", 0)
    for key, hf_key in spec.extra_config.items():
        value = field_value(reader, p + key)
        if value is not None:
            config[hf_key] = value.tolist() if isinstance(value, np.ndarray) else value
    scaling = _rope_scaling(reader, arch_name, freqs)
    if scaling is not None:
        config["rope_scaling"] = scaling
    if spec.config_fields is not None:
        config.update(spec.config_fields(reader.metadata, config))
    check_shapes(reader, config)
    return config


def check_shapes(reader: GGUFFile, config: dict[str, Any]) -> None:
    """The metadata against the tensor table, before a model of that size is allocated: the
    embedding's width is the hidden size and its rows hold every token of the vocabulary, the head
    has as many rows, and each of the ``block_count`` layers has Q/K/V/O and MLP tensors of the
    shapes the head counts and sizes say."""
    embed = reader.tensors["token_embd.weight"].shape
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    want = {"token_embd.weight": (vocab, hidden), "output.weight": (vocab, hidden)}
    q_rows = config["num_attention_heads"] * config["head_dim"]
    kv_rows = config["num_key_value_heads"] * config["head_dim"]
    ffn = config["intermediate_size"]
    for i in range(config["num_hidden_layers"]):
        want.update({f"blk.{i}.attn_q.weight": (q_rows, hidden), f"blk.{i}.attn_k.weight": (kv_rows, hidden),
                     f"blk.{i}.attn_v.weight": (kv_rows, hidden), f"blk.{i}.attn_output.weight": (hidden, q_rows),
                     f"blk.{i}.ffn_gate.weight": (ffn, hidden), f"blk.{i}.ffn_up.weight": (ffn, hidden),
                     f"blk.{i}.ffn_down.weight": (hidden, ffn)})
    for name, shape in want.items():
        tensor = reader.tensors.get(name)
        if tensor is None and name != "output.weight":
            raise _fail(reader, name, f"missing (the metadata states {config['num_hidden_layers']} layers)")
        if tensor is not None and tuple(tensor.shape) != shape:
            raise _fail(reader, name, f"shape {list(tensor.shape)} does not match the metadata's {list(shape)} "
                        f"(embedding_length {hidden}, head counts and sizes, feed_forward_length {ffn})")
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    if isinstance(tokens, StringArray) and tokens.length > embed[0]:
        raise _fail(reader, "tokenizer.ggml.tokens", f"{tokens.length} tokens but token_embd.weight has only "
                    f"{embed[0]} rows")


def gguf_model_config(path: str | os.PathLike) -> ModelConfig:
    """``ModelConfig`` of the GGUF file at ``path`` (reads the metadata and tensor table only)."""
    with GGUFFile(path) as reader:
        return ModelConfig.from_dict(hf_config(reader))
