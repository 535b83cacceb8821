"""The published ``config.json`` of the real models that real-shape checkpoints copy.

Values are those of the models' Hugging Face repositories (Qwen/Qwen2.5-0.5B, Qwen/Qwen3-0.6B,
meta-llama/Llama-3.2-1B); only the weights of our checkpoints are random. Each entry also names the
llama.cpp fixtures that give it its real tokenizer and chat template, and the tokenizer's special
tokens as the instruct models' ``tokenizer_config.json`` sets them (the GGUF vocabularies carry the
base models' BOS/EOS).

Checked against the published files: Qwen3-0.6B's config as its ``config.json`` on the Hub reads
(the same values are quoted in public model cards and ports), Llama-3.2-1B's as the
``meta-llama/Llama-3.2-1B-Instruct`` config at commit 4e20de3 reads (the base model's differs only in
``_name_or_path``). ``added_tokens`` are the real tokenizers' added tokens where the GGUF vocabulary
holds placeholders: qwen2's GGUF has ``[PAD151646]``... where Qwen2.5 has ``<|object_ref_start|>`` ...
``<tool_call>`` (151657), ``</tool_call>`` (151658) ... and Qwen3 adds ``<tool_response>`` (151665),
``</tool_response>``, ``<think>`` (151667) and ``</think>`` (151668), none of them special except the
vision/box markers; llama-bpe's GGUF is Llama 3.0's, where 3.1/3.2 renamed three reserved tokens to
``<|finetune_right_pad_id|>`` (128004), ``<|eom_id|>`` (128008) and ``<|python_tag|>`` (128010) and
renumbered the other reserved ones.
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
    added_tokens: dict = field(default_factory=dict)  # id -> (content, special): the real model's names
    renumber_reserved: bool = False  # number the remaining <|reserved_special_token_N|> anew, in id order


_QWEN25_ADDED = {
    151646: ("<|object_ref_start|>", True), 151647: ("<|object_ref_end|>", True), 151648: ("<|box_start|>", True),
    151649: ("<|box_end|>", True), 151650: ("<|quad_start|>", True), 151651: ("<|quad_end|>", True),
    151652: ("<|vision_start|>", True), 151653: ("<|vision_end|>", True), 151654: ("<|vision_pad|>", True),
    151655: ("<|image_pad|>", True), 151656: ("<|video_pad|>", True), 151657: ("<tool_call>", False),
    151658: ("</tool_call>", False), 151659: ("<|fim_prefix|>", False), 151660: ("<|fim_middle|>", False),
    151661: ("<|fim_suffix|>", False), 151662: ("<|fim_pad|>", False), 151663: ("<|repo_name|>", False),
    151664: ("<|file_sep|>", False),
}
_QWEN3_ADDED = {**_QWEN25_ADDED, 151665: ("<tool_response>", False), 151666: ("</tool_response>", False),
                151667: ("<think>", False), 151668: ("</think>", False)}
_LLAMA31_ADDED = {128004: ("<|finetune_right_pad_id|>", True), 128008: ("<|eom_id|>", True),
                  128010: ("<|python_tag|>", True)}


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
    added_tokens=_QWEN25_ADDED,
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
    vocab="qwen2",  # Qwen3 keeps Qwen2's byte-level BPE; its added tokens are renamed in (above)
    template="Qwen-Qwen3-0.6B",
    special_tokens={"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    eos_token_ids=(151645, 151643),
    added_tokens=_QWEN3_ADDED,
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
    added_tokens=_LLAMA31_ADDED,
    renumber_reserved=True,
)

# (arch, size) as ``checkpoint_path`` takes them -> the real model.
REAL_MODELS: dict[tuple[str, str], RealModel] = {
    ("qwen2", "0.5b"): QWEN25_05B,
    ("qwen3", "0.6b"): QWEN3_06B,
    ("llama", "1b"): LLAMA32_1B,
}
REAL_SIZES = frozenset(size for _, size in REAL_MODELS)
