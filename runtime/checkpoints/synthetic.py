"""Locally built, deterministic HF-format test checkpoints (no hub downloads exist here).

``make_checkpoint`` writes ``config.json``, ``model.safetensors``, ``generation_config.json``,
``tokenizer.json`` and ``tokenizer_config.json`` for a Llama, Qwen2, Qwen3 or Mistral model. Weights
come from numpy's PCG64 seeded by ``seed`` and the CRC32 of each tensor name, so the files are
byte-identical on every machine. ``checkpoint_path`` builds a checkpoint once under
``$RADIXLM_CACHE`` (default ``~/.cache/radixlm``) and returns the cached directory.

The random weights are scaled so that greedy decoding is useful in tests: the residual stream keeps
the current token's embedding, so the untied random LM head gives every token its own likely
successors (no collapse into one repeated token), while the layers add a context-dependent term of
the same size, so the KV cache matters. Logits spread by ~10, so top-1/top-2 gaps sit far above
float32 noise. Reserved vocabulary rows (see ``checkpoint_tokenizer``) are zero, as untrained rows
of real padded vocabularies are; the LM head rows of BOS, ``<|im_start|>`` and PAD are zero too, so
only text, tool and EOS tokens are ever predicted.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from radixlm.runtime.checkpoints import tokenizer_training as ckpt_tok
from radixlm.runtime.checkpoints.build_cache import build_cached, radixlm_cache

ARCHS = ("llama", "qwen2", "qwen3", "mistral")
SIZES = ("tiny", "small")
# Bump when the generated content changes in a way the source hash would not notice.
FORMAT_VERSION = 1


@dataclass(frozen=True)
class _Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_positions: int


_SHAPES = {
    "tiny": _Shape(256, 4, 8, 4, 32, 688, 8192, 4096),
    "small": _Shape(1024, 12, 16, 8, 64, 2816, 32000, 8192),
}
# Qwen3 decouples head_dim from hidden/heads (heads * head_dim != hidden), as the real models do.
_QWEN3_HEAD_DIM = {"tiny": 64, "small": 128}

_ARCH_FIELDS = {
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "rope_theta": 500000.0,
              "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "mlp_bias": False, "pretraining_tp": 1},
    "mistral": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "rope_theta": 1000000.0,
                "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "sliding_window": None},
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "rope_theta": 1000000.0,
              "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "use_sliding_window": False,
              "sliding_window": None, "max_window_layers": 0},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "rope_theta": 1000000.0,
              "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "use_sliding_window": False,
              "sliding_window": None, "max_window_layers": 0},
}


def _check_args(arch: str, size: str) -> None:
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")


def make_config(arch: str, size: str, token_ids: dict[str, int]) -> dict:
    """The ``config.json`` dictionary, with exactly the keys HF's ``<Arch>Config`` reads."""
    _check_args(arch, size)
    s = _SHAPES[size]
    head_dim = _QWEN3_HEAD_DIM[size] if arch == "qwen3" else s.head_dim
    config = {
        **_ARCH_FIELDS[arch],
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_hidden_layers": s.layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": s.max_positions,
        "initializer_range": 0.02,
        "rope_scaling": None,
        "attention_bias": arch == "qwen2",
        "attention_dropout": 0.0,
        "vocab_size": s.vocab,
        "bos_token_id": token_ids["bos"],
        "eos_token_id": token_ids["im_end"],
        "pad_token_id": token_ids["pad"],
        "use_cache": True,
        "torch_dtype": "float32",
    }
    return dict(sorted(config.items()))


def _tensor_specs(config: dict) -> dict[str, tuple[tuple[int, ...], str]]:
    """HF tensor name -> (shape, kind); kind picks the initialiser in ``_init_tensor``."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    q_dim = config["num_attention_heads"] * config["head_dim"]
    kv_dim = config["num_key_value_heads"] * config["head_dim"]
    specs: dict[str, tuple[tuple[int, ...], str]] = {
        "model.embed_tokens.weight": ((config["vocab_size"], h), "embed"),
        "model.norm.weight": ((h,), "norm"),
    }
    if not config["tie_word_embeddings"]:
        specs["lm_head.weight"] = ((config["vocab_size"], h), "lm_head")
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        specs[p + "input_layernorm.weight"] = ((h,), "norm")
        specs[p + "post_attention_layernorm.weight"] = ((h,), "norm")
        specs[p + "self_attn.q_proj.weight"] = ((q_dim, h), "qk")
        specs[p + "self_attn.k_proj.weight"] = ((kv_dim, h), "qk")
        specs[p + "self_attn.v_proj.weight"] = ((kv_dim, h), "linear")
        specs[p + "self_attn.o_proj.weight"] = ((h, q_dim), "out")
        if config["attention_bias"]:
            specs[p + "self_attn.q_proj.bias"] = ((q_dim,), "bias")
            specs[p + "self_attn.k_proj.bias"] = ((kv_dim,), "bias")
            specs[p + "self_attn.v_proj.bias"] = ((kv_dim,), "bias")
        if config["model_type"] == "qwen3":
            specs[p + "self_attn.q_norm.weight"] = ((config["head_dim"],), "norm")
            specs[p + "self_attn.k_norm.weight"] = ((config["head_dim"],), "norm")
        specs[p + "mlp.gate_proj.weight"] = ((inter, h), "linear")
        specs[p + "mlp.up_proj.weight"] = ((inter, h), "linear")
        specs[p + "mlp.down_proj.weight"] = ((h, inter), "out")
    return specs


# Standard deviations in units of 1/sqrt(fan_in) (so activations keep a unit scale):
# q/k at 1.5 give attention scores with a std of ~2 (peaked but not one-hot); the layer outputs
# ("out") at 0.6 are comparable to the token embedding, so context changes the prediction;
# the LM head at 10 spreads logits by several units, far above float32 rounding.
_STD = {"qk": 1.5, "linear": 1.0, "out": 0.6, "lm_head": 10.0}
# Tied (only through ``overrides``): the embedding is also the LM head, logits std ~ 0.4 * sqrt(hidden).
# Such variants test loading and logits; their greedy output tends to repeat the current token.
_TIED_EMBED_STD = 0.4


def _rng(seed: int, arch: str, name: str) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64([seed, zlib.crc32(arch.encode()), zlib.crc32(name.encode())]))


def _init_tensor(name: str, shape: tuple[int, ...], kind: str, seed: int, config: dict, token_ids: dict):
    rng = _rng(seed, config["model_type"], name)
    if kind == "norm":
        # Not all ones, so that a forward that forgets a norm weight is caught by the HF comparison.
        return rng.uniform(0.8, 1.2, size=shape).astype(np.float32)
    if kind == "bias":
        return (0.3 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    if kind == "embed":
        std = _TIED_EMBED_STD if config["tie_word_embeddings"] else 1.0
        weight = (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        weight[token_ids["num_trained"]:] = 0.0  # reserved tokens are "untrained", as in real padded vocabularies
        return weight
    std = _STD[kind] / np.sqrt(shape[1])
    weight = (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    if kind == "lm_head":
        # Logit 0 is far below the top logits: reserved and input-only control tokens are never predicted.
        weight[token_ids["num_trained"]:] = 0.0
        weight[[token_ids["bos"], token_ids["im_start"], token_ids["pad"]]] = 0.0
    return weight


def make_weights(config: dict, seed: int, token_ids: dict[str, int]) -> dict[str, np.ndarray]:
    """All tensors of the checkpoint, keyed by HF name (float32); ``token_ids`` from the tokenizer build."""
    return {
        name: _init_tensor(name, shape, kind, seed, config, token_ids)
        for name, (shape, kind) in sorted(_tensor_specs(config).items())
    }


def _generation_config(token_ids: dict[str, int], add_bos: bool) -> dict:
    return {
        "bos_token_id": token_ids["bos"] if add_bos else None,
        "eos_token_id": [token_ids["im_end"], token_ids["eos"]],
        "pad_token_id": token_ids["pad"],
        "do_sample": False,
        "transformers_version": "4.45.0",
    }


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def make_checkpoint(path: str | os.PathLike, arch: str = "llama", size: str = "tiny", seed: int = 0,
                    overrides: dict | None = None) -> Path:
    """Write an HF-format checkpoint directory at ``path`` (created if missing) and return it.

    ``overrides`` are merged into ``config.json`` (e.g. ``{"tie_word_embeddings": True}`` or a
    ``rope_scaling`` dict); the tensors follow the merged config. Same arguments -> identical bytes.
    """
    from safetensors.numpy import save_file

    _check_args(arch, size)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    s = _SHAPES[size]
    add_bos = arch in ("llama", "mistral")
    token_ids = ckpt_tok.write_tokenizer_files(out, s.vocab, add_bos, s.max_positions)
    config = {**make_config(arch, size, token_ids), **(overrides or {})}
    if not add_bos:
        config["bos_token_id"] = None
    _write_json(out / "config.json", dict(sorted(config.items())))
    _write_json(out / "generation_config.json", _generation_config(token_ids, add_bos))
    weights = make_weights(config, seed, token_ids)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    os.chmod(out / "model.safetensors", 0o644)  # safetensors writes 0600; the cache may be shared
    return out


def content_version() -> str:
    """Hash of everything that determines a checkpoint's bytes (sources, corpus, template, versions)."""
    import tokenizers

    digest = hashlib.sha256(f"{FORMAT_VERSION}|{np.__version__}|{tokenizers.__version__}".encode())
    for source in (Path(__file__), Path(ckpt_tok.__file__), ckpt_tok.CORPUS_PATH, ckpt_tok.CHAT_TEMPLATE_PATH):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


def cache_dir() -> Path:
    """``$RADIXLM_CACHE`` or ``~/.cache/radixlm``."""
    return radixlm_cache()


def checkpoint_path(arch: str = "llama", size: str = "tiny", seed: int = 0) -> str:
    """Build the checkpoint once under :func:`cache_dir` and return its directory.

    The directory name carries :func:`content_version`, so a changed generator never reuses stale
    files. The build goes to a temporary sibling that is renamed into place, so a reader never sees
    a half-written checkpoint and two racing processes both end up with the same complete one.
    Real-model sizes are built by ``radixlm.runtime.testing.checkpoint_path``.
    """
    _check_args(arch, size)
    final = cache_dir() / f"{arch}-{size}-seed{seed}-{content_version()}"
    return build_cached(final, lambda tmp: make_checkpoint(tmp, arch, size, seed))


def default_model_path() -> str:
    """The embedded default model: the tiny Llama checkpoint."""
    return checkpoint_path("llama", "tiny")
