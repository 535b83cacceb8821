"""Model architecture facts read once from an HF ``config.json``: ``ModelConfig`` and its readers.

``ModelConfig.from_path(path)`` finds the architecture's row in ``architectures.ARCHITECTURES`` and
calls its reader: ``llama_config`` or ``gemma3_config`` (this module). Checkpoints written
by transformers 4.x (``torch_dtype``, ``rope_theta`` + ``rope_scaling``) or 5.x (``dtype``,
``rope_parameters``) are read alike. Llama, Mistral, Qwen2 and Qwen3 share one reader and one model
class; their rows differ only in the flags ``qkv_bias`` / ``o_bias`` / ``mlp_bias`` (``biases``:
Qwen2 always has q/k/v biases; Llama and Qwen3 follow ``attention_bias``; Mistral has none) and
``qk_norm`` (Qwen3).

Sliding-window attention (Mistral, or Qwen with ``use_sliding_window``) is handled by clamping
``context_len`` to the window: a sequence no longer than the window attends to exactly the same keys
with full causal attention, so the full-attention kernels are exact within ``context_len``.

``gemma3_config``: Gemma 3 text configs (``gemma3_text``, or a ``gemma3`` config's ``text_config``).
Fields absent from the file take transformers' ``Gemma3TextConfig`` defaults, as the multimodal
configs on the Hub rely on them. Layer types come from ``layer_types`` or, in older files, from
``sliding_window_pattern`` (every pattern-th layer global). RoPE: transformers 5.x writes
``rope_parameters`` per layer type; 4.x files give ``rope_theta`` (+ ``rope_scaling``) for the global
layers and ``rope_local_base_freq`` for the sliding ones. ``context_len`` is never clamped to the
window: the global layers see the whole context.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# rope type -> keys its parameters must carry
SUPPORTED_ROPE_TYPES: dict[str, tuple[str, ...]] = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "freq_factors": ("factors",),  # a GGUF's rope_freqs tensor: one divisor per frequency
}


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a decoder-only checkpoint; built once, never mutated.

    ``rope_scaling`` is ``None`` for plain RoPE, else a dict with ``rope_type`` in
    ``SUPPORTED_ROPE_TYPES`` and that type's parameters. ``torch_dtype`` is the checkpoint's dtype
    name (``"bfloat16"``, ...) or ``None``. ``context_len`` is the longest sequence the model may
    see (``max_position_embeddings``, clamped to ``sliding_window`` when one is in effect).
    """

    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    context_len: int
    tie_word_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    torch_dtype: str | None
    o_bias: bool = False
    mlp_bias: bool = False
    sliding_window: int | None = None
    # Gemma 3 (``gemma3_config``): per-layer "sliding_attention" / "full_attention", the sliding
    # layers' RoPE base, the attention scale, the final logit soft cap, the MLP activation
    layer_types: tuple[str, ...] = ()
    local_rope_theta: float | None = None
    attention_scale: float | None = None
    final_logit_softcapping: float | None = None
    hidden_act: str = "silu"

    @classmethod
    def from_path(cls, path: str | os.PathLike) -> ModelConfig:
        """Read ``<path>/config.json`` (or a GGUF file's metadata: ``architectures.gguf_model_config``);
        ``FileNotFoundError`` if absent, ``ValueError`` if unsupported."""
        from radixlm.runtime.gguf_path import gguf_file

        gguf = gguf_file(path)
        if gguf is not None:
            from radixlm.runtime.model.architectures import gguf_model_config

            return gguf_model_config(gguf)
        config_file = os.path.join(os.fspath(path), "config.json")
        if not os.path.isfile(config_file):
            raise FileNotFoundError(f"config.json not found: {config_file}")
        with open(config_file, encoding="utf-8") as f:
            try:
                raw = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{config_file} is not valid JSON: {e}") from e
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        """Build from the parsed ``config.json`` contents, with the reader of its architecture's row."""
        from radixlm.runtime.model.architectures import config_architecture

        row = config_architecture(raw)
        return row.read_config(raw, row.name)


def llama_config(raw: dict[str, Any], architecture: str, *, biases: Callable[[dict[str, Any]], Biases],
                 qk_norm: bool = False) -> ModelConfig:
    """The ``ModelConfig`` of a Llama-family ``config.json`` (``biases``: its row's bias rule)."""
    num_heads = _required(raw, "num_attention_heads")
    hidden_size = _required(raw, "hidden_size")
    num_kv_heads = raw.get("num_key_value_heads") or num_heads
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_attention_heads ({num_heads}) must be a multiple of num_key_value_heads ({num_kv_heads})"
        )
    head_dim = raw.get("head_dim") or hidden_size // num_heads
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"hidden_act {act!r} is not supported; only 'silu'")
    rope_theta, rope_scaling = _rope(raw)
    sliding_window = _sliding_window(raw)
    context_len = _required(raw, "max_position_embeddings")
    if sliding_window is not None:
        context_len = min(context_len, sliding_window)
    qkv_bias, o_bias, mlp_bias = biases(raw)
    return ModelConfig(
        architecture=architecture,
        vocab_size=_required(raw, "vocab_size"),
        hidden_size=hidden_size,
        num_layers=_required(raw, "num_hidden_layers"),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        intermediate_size=_required(raw, "intermediate_size"),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        context_len=context_len,
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        qkv_bias=qkv_bias,
        qk_norm=qk_norm,
        torch_dtype=raw.get("dtype") or raw.get("torch_dtype"),
        o_bias=o_bias,
        mlp_bias=mlp_bias,
        sliding_window=sliding_window,
    )


# (qkv, o_proj, mlp) biases, as each HF class builds them
Biases = tuple[bool, bool, bool]


def attention_biases(raw: dict[str, Any], mlp: bool = True) -> Biases:
    """Llama (and, with ``mlp=False``, Qwen3): q/k/v and o follow ``attention_bias``, the MLP ``mlp_bias``."""
    attention_bias = bool(raw.get("attention_bias", False))
    return attention_bias, attention_bias, mlp and bool(raw.get("mlp_bias", False))


def qkv_biases(raw: dict[str, Any]) -> Biases:
    """Qwen2: q/k/v biases always (it ignores ``attention_bias``), none elsewhere."""
    return True, False, False


def no_biases(raw: dict[str, Any]) -> Biases:
    """Mistral: no biases."""
    return False, False, False


def _required(raw: dict[str, Any], key: str) -> Any:
    if raw.get(key) is None:
        raise ValueError(f"config.json is missing required field {key!r}")
    return raw[key]


def _rope(raw: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, normalised rope_scaling) from either the 4.x or the 5.x config layout."""
    params = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    rope_theta = float(params.pop("rope_theta", raw.get("rope_theta", 10000.0)))
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    if rope_type == "default":
        return rope_theta, None
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(
            f"rope_scaling type {rope_type!r} is not supported; supported: default, "
            f"{', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    for key in SUPPORTED_ROPE_TYPES[rope_type]:
        if params.get(key) is None:
            raise ValueError(f"rope_scaling of type {rope_type!r} is missing {key!r}")
    return rope_theta, {"rope_type": rope_type, **params}


def _sliding_window(raw: dict[str, Any]) -> int | None:
    """The sliding window in effect, or None when every layer attends to its whole context."""
    window = raw.get("sliding_window")
    if window is None:
        return None
    if "layer_types" in raw and raw["layer_types"] is not None:
        in_effect = "sliding_attention" in raw["layer_types"]
    elif "use_sliding_window" in raw:
        in_effect = bool(raw["use_sliding_window"])
    else:
        in_effect = True  # Mistral: the window applies to every layer
    return int(window) if in_effect else None


SLIDING, FULL = "sliding_attention", "full_attention"

# transformers' Gemma3TextConfig defaults
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072,
    "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256, "sliding_window": 4096, "tie_word_embeddings": True,
    "hidden_activation": "gelu_pytorch_tanh", "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
}
GELU_TANH = "gelu_pytorch_tanh"


def gemma3_config(raw: dict[str, Any], architecture: str) -> ModelConfig:
    """Build the ``ModelConfig`` of a Gemma 3 config dict (the text model's fields, or its
    ``text_config``'s); ``ValueError`` for what it cannot run."""
    text = {**TEXT_DEFAULTS, **{k: v for k, v in (raw.get("text_config") or raw).items() if v is not None}}
    if "text_config" in raw and raw.get("tie_word_embeddings") is not None:
        text.setdefault("tie_word_embeddings", raw["tie_word_embeddings"])
    num_heads, num_kv_heads = int(text["num_attention_heads"]), int(text["num_key_value_heads"])
    if num_heads % num_kv_heads != 0:
        raise ValueError(f"num_attention_heads ({num_heads}) must be a multiple of num_key_value_heads "
                         f"({num_kv_heads})")
    act = text.get("hidden_activation") or text.get("hidden_act") or GELU_TANH
    if act != GELU_TANH:
        raise ValueError(f"hidden_activation {act!r} is not supported for Gemma 3; only {GELU_TANH!r}")
    for unsupported in ("attn_logit_softcapping", "use_bidirectional_attention"):
        if text.get(unsupported):
            raise ValueError(f"{unsupported}={text[unsupported]!r} is not supported for Gemma 3")
    rope_theta, rope_scaling, local_theta = _gemma3_rope(text)
    layer_types = _layer_types(text)
    window = int(text["sliding_window"]) if SLIDING in layer_types else None
    softcap = text.get("final_logit_softcapping")
    return ModelConfig(
        architecture=architecture,
        vocab_size=int(text["vocab_size"]),
        hidden_size=int(text["hidden_size"]),
        num_layers=int(text["num_hidden_layers"]),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=int(text["head_dim"]),
        intermediate_size=int(text["intermediate_size"]),
        rms_norm_eps=float(text["rms_norm_eps"]),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        context_len=int(text["max_position_embeddings"]),
        tie_word_embeddings=bool(text["tie_word_embeddings"]),
        qkv_bias=bool(text.get("attention_bias", False)),
        qk_norm=True,
        torch_dtype=raw.get("dtype") or raw.get("torch_dtype") or text.get("dtype") or text.get("torch_dtype"),
        o_bias=bool(text.get("attention_bias", False)),
        sliding_window=window,
        layer_types=layer_types,
        local_rope_theta=local_theta,
        attention_scale=float(text["query_pre_attn_scalar"]) ** -0.5,
        final_logit_softcapping=None if softcap is None else float(softcap),
        hidden_act=GELU_TANH,
    )


def _layer_types(text: dict[str, Any]) -> tuple[str, ...]:
    num_layers = int(text["num_hidden_layers"])
    types = text.get("layer_types")
    if types is None:
        pattern = int(text.get("sliding_window_pattern") or 6)
        types = [SLIDING if (i + 1) % pattern else FULL for i in range(num_layers)]
    if len(types) != num_layers or any(t not in (SLIDING, FULL) for t in types):
        raise ValueError(f"layer_types must list {num_layers} entries, each {SLIDING!r} or {FULL!r}; got {types}")
    return tuple(types)


def _gemma3_rope(text: dict[str, Any]) -> tuple[float, dict[str, Any] | None, float]:
    """(global rope_theta, global rope_scaling, local rope_theta)."""
    params = text.get("rope_parameters")
    if isinstance(params, dict) and (FULL in params or SLIDING in params):
        full = dict(params.get(FULL) or {})
        full.setdefault("rope_theta", TEXT_DEFAULTS["rope_theta"])
        rope_theta, rope_scaling = _rope({"rope_parameters": full})
        local = dict(params.get(SLIDING) or {})
        local_theta, local_scaling = _rope({"rope_parameters": {"rope_theta": TEXT_DEFAULTS["rope_local_base_freq"],
                                                                **local}})
        if local_scaling is not None:
            raise ValueError("rope scaling on Gemma 3's sliding_attention layers is not supported")
        return rope_theta, rope_scaling, local_theta
    rope_theta, rope_scaling = _rope(text)
    return rope_theta, rope_scaling, float(text["rope_local_base_freq"])
