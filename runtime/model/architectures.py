"""The architectures we serve, as one table: name -> config reader, model class, weight-name maps.

``ARCHITECTURES`` has one ``Architecture`` per HF ``architectures[0]`` value; ``architecture(name)``
finds a row by it, ``gguf_architecture(name)`` by a GGUF file's ``general.architecture``. A row
names the reader that turns ``config.json`` into a ``ModelConfig`` (``model_config``), the module
class that runs it (``llama``, ``gemma3``), how a safetensors checkpoint's tensor names map onto
that class's (``tensor_name``: a multimodal Gemma 3's language model is renamed, its vision tower
dropped) and, for a GGUF file, its ``GGUFWeights``: whether llama.cpp's converter permuted the Q/K
rows (``convert_hf_to_gguf`` does for ``llama``, so that ggml's RoPE can rotate adjacent pairs; the
loader undoes it), the tensor names it adds to the common ones, its metadata fields and the offset
its norms were stored with. Adding an architecture is one row here (plus its model class, if ours
has none); nothing else in ``runtime/`` dispatches on a family's name.

A GGUF file's metadata is mapped to an HF ``config.json`` dict (``hf_config``) and built by the
same reader, so a GGUF model gets the same checks (and the same per-architecture bias flags) as an
HF checkpoint.

Gemma 3 in a GGUF file (``general.architecture`` = ``gemma3``): llama.cpp's converter
(``convert_hf_to_gguf.py``, ``Gemma3Model``) stores every RMSNorm weight as ``w + 1`` (ggml's norm
multiplies by the weight alone), so the loader subtracts ``GEMMA3_NORM_OFFSET`` to get transformers'
``w`` back (``GemmaRMSNorm`` multiplies by ``1 + w``); transformers' GGUF reader does the same. The
file names the layer norms after their place: ``attn_norm`` (input), ``post_attention_norm``,
``ffn_norm`` (pre-feedforward), ``post_ffw_norm``. Metadata llama.cpp does not write and hard-codes
for ``gemma3``, as this module does: the local (sliding-layer) RoPE base 10000, every 6th layer
global, and the attention scale ``query_pre_attn_scalar ** -0.5`` with ``query_pre_attn_scalar`` =
``key_length``, except for the 27B model (62 layers), whose scalar is ``hidden / heads``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from gguf import quants
from radixlm.runtime.model.gemma3 import Gemma3ForCausalLM, text_tensor_name
from radixlm.runtime.model.gguf_reader import GGUFFile, StringArray
from radixlm.runtime.model.llama import LlamaForCausalLM
from radixlm.runtime.model.model_config import (
    ModelConfig,
    attention_biases,
    gemma3_config,
    llama_config,
    no_biases,
    qkv_biases,
)

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
MAX_SIZE = 1 << 24  # the largest hidden size, head count, layer count or context a file may state
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(.+)")


@dataclass(frozen=True)
class GGUFWeights:
    """How a GGUF file of one ``general.architecture`` (``name``) names and stores its weights.

    ``permuted_qk``: Q/K weight (and bias) rows were permuted per head by the converter.
    ``extra_layer_tensors``: GGUF layer tensor suffix -> HF suffix, beyond (or instead of) ``LAYER_TENSORS``.
    ``extra_config``: GGUF metadata key (after ``<arch>.``) -> HF config field, beyond the common ones
    (``hf_config``); a key the file lacks is left out.
    ``config_fields``: ``(metadata, config) -> fields`` computed fields this architecture adds.
    ``norm_offset``: the converter stored every norm weight plus this (Gemma's ``1 + w``); subtracted.
    """

    name: str
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


GEMMA3_NORM_OFFSET = 1.0
LOCAL_ROPE_BASE = 10_000.0
SLIDING_PATTERN = 6
_GEMMA3_27B_LAYERS = 62

# GGUF metadata key (after ``gemma3.``) -> config field, when the file has it
GEMMA3_METADATA_FIELDS = {"final_logit_softcapping": "final_logit_softcapping",
                   "rope.local.freq_base": "rope_local_base_freq"}

# GGUF layer tensor suffix -> HF suffix, where Gemma 3 differs from (or adds to) the llama names
GEMMA3_LAYER_TENSORS = {
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}


def gemma3_gguf_fields(metadata: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The computed ``config.json`` fields of a ``gemma3`` file (``config``: the fields read so far)."""
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    scalar = config["hidden_size"] // heads if layers == _GEMMA3_27B_LAYERS else config["head_dim"]
    return {
        "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": scalar,
        "rope_local_base_freq": float(config.get("rope_local_base_freq", LOCAL_ROPE_BASE)),
        "layer_types": _gguf_layer_types(metadata.get("gemma3.attention.sliding_window_pattern"), layers),
    }


def _gguf_layer_types(pattern: Any, layers: int) -> list[str]:
    """``sliding_window_pattern``: absent (every 6th layer global), an int, or one bool per layer."""
    if pattern is None or not hasattr(pattern, "__len__"):  # a scalar (numpy's included)
        every = int(pattern or SLIDING_PATTERN)
        return ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)]
    flags = [bool(x) for x in pattern]
    if len(flags) != layers:
        raise ValueError(f"GGUF gemma3.attention.sliding_window_pattern has {len(flags)} entries for {layers} layers")
    return ["sliding_attention" if sliding else "full_attention" for sliding in flags]


def _same_name(name: str) -> str | None:
    return name


@dataclass(frozen=True)
class Architecture:
    """One architecture we serve (a row of ``ARCHITECTURES``).

    ``name``: HF ``architectures[0]``; ``model_type``: ``config.json``'s ``model_type`` (read when a
    file has no ``architectures`` list); ``read_config``: ``(raw config.json, name) -> ModelConfig``;
    ``model_class``: the module that runs it; ``tensor_name``: a safetensors tensor's name -> the
    model class's name for it, or None for a tensor the model does not use; ``gguf``: its GGUF form,
    if llama.cpp writes one we read.
    """

    name: str
    model_type: str
    read_config: Callable[[dict[str, Any], str], ModelConfig]
    model_class: type[LlamaForCausalLM]
    tensor_name: Callable[[str], str | None] = _same_name
    gguf: GGUFWeights | None = None


QK_NORMS = {"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}

ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("LlamaForCausalLM", "llama", partial(llama_config, biases=attention_biases), LlamaForCausalLM,
                 gguf=GGUFWeights("llama", permuted_qk=True)),
    Architecture("MistralForCausalLM", "mistral", partial(llama_config, biases=no_biases), LlamaForCausalLM,
                 gguf=GGUFWeights("mistral", permuted_qk=True)),
    Architecture("Qwen2ForCausalLM", "qwen2", partial(llama_config, biases=qkv_biases), LlamaForCausalLM,
                 gguf=GGUFWeights("qwen2")),
    Architecture("Qwen3ForCausalLM", "qwen3", partial(llama_config, biases=partial(attention_biases, mlp=False),
                                                      qk_norm=True), LlamaForCausalLM,
                 gguf=GGUFWeights("qwen3", extra_layer_tensors=QK_NORMS)),
    Architecture("Gemma3ForCausalLM", "gemma3_text", gemma3_config, Gemma3ForCausalLM,
                 gguf=GGUFWeights("gemma3", extra_layer_tensors=GEMMA3_LAYER_TENSORS, norm_offset=GEMMA3_NORM_OFFSET,
                                  extra_config=GEMMA3_METADATA_FIELDS, config_fields=gemma3_gguf_fields)),
    Architecture("Gemma3ForConditionalGeneration", "gemma3", gemma3_config, Gemma3ForCausalLM,
                 tensor_name=text_tensor_name),
)
_BY_NAME = {a.name: a for a in ARCHITECTURES}
_BY_GGUF = {a.gguf.name: a for a in ARCHITECTURES if a.gguf is not None}
SUPPORTED_ARCHITECTURES = tuple(_BY_NAME)


def architecture(name: str) -> Architecture:
    """The row of HF architecture ``name``; ``ValueError`` listing the supported ones otherwise."""
    if name not in _BY_NAME:
        raise ValueError(f"unsupported architecture {name}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    return _BY_NAME[name]


def config_architecture(raw: dict[str, Any]) -> Architecture:
    """The row a parsed ``config.json`` names: its first supported ``architectures`` entry, or (with
    no such list, as a bare ``XConfig.save_pretrained`` writes) its ``model_type``'s."""
    archs = raw.get("architectures") or []
    if not archs:
        by_type = {a.model_type: a for a in ARCHITECTURES}
        if raw.get("model_type") in by_type:
            return by_type[raw["model_type"]]
    for name in archs:
        if name in _BY_NAME:
            return _BY_NAME[name]
    named = ", ".join(archs) if archs else f"none (model_type={raw.get('model_type')!r})"
    raise ValueError(f"unsupported architecture {named}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")


def gguf_architecture(name: str) -> Architecture:
    """The row of GGUF ``general.architecture`` ``name``; ``ValueError`` naming it if unsupported."""
    if name not in _BY_GGUF:
        raise ValueError(f"GGUF architecture {name!r} is not supported; supported: {', '.join(_BY_GGUF)}")
    return _BY_GGUF[name]


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
    row = gguf_architecture(arch_name)
    spec = row.gguf
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
        "architectures": [row.name], "model_type": row.model_type,
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


