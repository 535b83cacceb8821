"""Model architecture facts read once from an HF ``config.json`` (no torch).

``ModelConfig.from_path(path)`` accepts Llama, Mistral, Qwen2 and Qwen3 checkpoints written by
transformers 4.x (``torch_dtype``, ``rope_theta`` + ``rope_scaling``) or 5.x (``dtype``,
``rope_parameters``). The four architectures share one model class; they differ only in the flags
``qkv_bias`` / ``o_bias`` / ``mlp_bias`` (Qwen2 always has q/k/v biases; Llama and Qwen3
follow ``attention_bias``) and ``qk_norm`` (Qwen3).

Sliding-window attention (Mistral, or Qwen with ``use_sliding_window``) is handled by clamping
``context_len`` to the window: a sequence no longer than the window attends to exactly the same keys
with full causal attention, so the full-attention kernels are exact within ``context_len``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                           "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")
# used when config.json has no "architectures" list (as a bare ``XConfig.save_pretrained`` writes)
MODEL_TYPES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
               "qwen3": "Qwen3ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
               "gemma3": "Gemma3ForConditionalGeneration"}

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
        """Read ``<path>/config.json`` (or a GGUF file's metadata: ``gguf_config``); ``FileNotFoundError``
        if absent, ``ValueError`` if unsupported."""
        from radixlm.runtime.gguf_path import gguf_file

        gguf = gguf_file(path)
        if gguf is not None:
            from radixlm.runtime.model.gguf_config import gguf_model_config

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
        """Build from the parsed ``config.json`` contents."""
        architecture = _architecture(raw)
        if architecture.startswith("Gemma3"):
            from radixlm.runtime.model.gemma3_config import gemma3_config

            return gemma3_config(cls, raw)
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
        qkv_bias, o_bias, mlp_bias = _biases(architecture, raw)
        return cls(
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
            qk_norm=architecture == "Qwen3ForCausalLM",
            torch_dtype=raw.get("dtype") or raw.get("torch_dtype"),
            o_bias=o_bias,
            mlp_bias=mlp_bias,
            sliding_window=sliding_window,
        )


def _required(raw: dict[str, Any], key: str) -> Any:
    if raw.get(key) is None:
        raise ValueError(f"config.json is missing required field {key!r}")
    return raw[key]


def _architecture(raw: dict[str, Any]) -> str:
    archs = raw.get("architectures") or []
    if not archs and raw.get("model_type") in MODEL_TYPES:
        return MODEL_TYPES[raw["model_type"]]
    for arch in archs:
        if arch in SUPPORTED_ARCHITECTURES:
            return arch
    named = ", ".join(archs) if archs else f"none (model_type={raw.get('model_type')!r})"
    raise ValueError(
        f"unsupported architecture {named}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
    )


def _biases(architecture: str, raw: dict[str, Any]) -> tuple[bool, bool, bool]:
    """(qkv, o_proj, mlp) biases, as each HF class builds them (Qwen2 ignores ``attention_bias``)."""
    attention_bias = bool(raw.get("attention_bias", False))
    if architecture == "MistralForCausalLM":
        return False, False, False
    if architecture == "Qwen2ForCausalLM":
        return True, False, False
    if architecture == "Qwen3ForCausalLM":
        return attention_bias, attention_bias, False
    return attention_bias, attention_bias, bool(raw.get("mlp_bias", False))


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
