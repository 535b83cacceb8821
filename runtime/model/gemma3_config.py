"""Gemma 3 text configs (``gemma3_text``, or a ``gemma3`` config's ``text_config``) -> ``ModelConfig``.

Fields absent from the file take transformers' ``Gemma3TextConfig`` defaults, as the multimodal
configs on the Hub rely on them. Layer types come from ``layer_types`` or, in older files, from
``sliding_window_pattern`` (every pattern-th layer global). RoPE: transformers 5.x writes
``rope_parameters`` per layer type; 4.x files give ``rope_theta`` (+ ``rope_scaling``) for the global
layers and ``rope_local_base_freq`` for the sliding ones. ``context_len`` is never clamped to the
window: the global layers see the whole context.
"""

from __future__ import annotations

from typing import Any

from radixlm.runtime.model.model_config import ModelConfig, _rope

SLIDING, FULL = "sliding_attention", "full_attention"

# transformers' Gemma3TextConfig defaults
TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131_072,
    "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256, "sliding_window": 4096, "tie_word_embeddings": True,
    "hidden_activation": "gelu_pytorch_tanh", "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0,
}
GELU_TANH = "gelu_pytorch_tanh"


def gemma3_config(cls: type[ModelConfig], raw: dict[str, Any]) -> ModelConfig:
    """Build the ``ModelConfig`` of a Gemma 3 config dict; ``ValueError`` for what it cannot run."""
    architecture = "Gemma3ForConditionalGeneration" if "text_config" in raw else "Gemma3ForCausalLM"
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
    return cls(
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
