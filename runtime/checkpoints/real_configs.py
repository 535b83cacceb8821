"""The published ``config.json`` of the real models that real-shape checkpoints copy.

Values are those of the models' Hugging Face repositories (Qwen/Qwen2.5-0.5B, Qwen/Qwen3-0.6B,
meta-llama/Llama-3.2-1B); only the weights of our checkpoints are random. Each entry also names the
llama.cpp fixtures that give it its real tokenizer and chat template, and the tokenizer's special
tokens as the instruct models' ``tokenizer_config.json`` sets them (the GGUF vocabularies carry the
base models' BOS/EOS).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RealModel:
    """One real model: its config, tokenizer fixture, chat template fixture and special tokens."""

    name: str
    config: dict
    vocab: str
    template: str
    special_tokens: dict = field(default_factory=dict)
    eos_token_ids: tuple[int, ...] = ()


QWEN25_05B = RealModel(
    name="Qwen2.5-0.5B",
    config={
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
        "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
        "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True, "use_mrope": False,
        "use_sliding_window": False, "vocab_size": 151936,
    },
    vocab="qwen2",
    template="Qwen-Qwen2.5-7B-Instruct",  # the whole Qwen2.5 instruct family shares this template
    special_tokens={"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    eos_token_ids=(151645, 151643),
)

QWEN3_06B = RealModel(
    name="Qwen3-0.6B",
    config={
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
        "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
        "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
        "use_sliding_window": False, "vocab_size": 151936,
    },
    vocab="qwen2",  # Qwen3 keeps Qwen2's byte-level BPE (its added tokens are not in this GGUF)
    template="Qwen-Qwen3-0.6B",
    special_tokens={"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    eos_token_ids=(151645, 151643),
)

LLAMA32_1B = RealModel(
    name="Llama-3.2-1B",
    config={
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
        "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
        "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256,
    },
    vocab="llama-bpe",
    template="meta-llama-Llama-3.2-3B-Instruct",  # 1B and 3B instruct share the template
    special_tokens={"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": None},
    eos_token_ids=(128001, 128008, 128009),
)

# (arch, size) as ``checkpoint_path`` takes them -> the real model.
REAL_MODELS: dict[tuple[str, str], RealModel] = {
    ("qwen2", "0.5b"): QWEN25_05B,
    ("qwen3", "0.6b"): QWEN3_06B,
    ("llama", "1b"): LLAMA32_1B,
}
REAL_SIZES = frozenset(size for _, size in REAL_MODELS)
