"""Real-shape checkpoints: a real model's config, tokenizer and chat template, with random weights.

``make_real_checkpoint(path, arch, size)`` writes an HF directory for one of
``real_configs.REAL_MODELS`` (Qwen2.5-0.5B, Qwen3-0.6B, Llama-3.2-1B): the published config.json,
the real tokenizer converted from llama.cpp's GGUF vocabulary, the real chat template from
llama.cpp's template corpus, and deterministic random weights stored as bfloat16 (half the disk of
float32; loading as float32 is exact). The fixtures come from PyPI, so a missing one raises
``FixturesMissing`` naming ``python tests/llamacpp_assets.py``.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import numpy as np
from radixlm.runtime.checkpoints.bf16_safetensors import save_bf16
from radixlm.runtime.checkpoints.build_cache import build_cached
from radixlm.runtime.checkpoints.gguf_tokenizer import gguf_tokenizer_dir
from radixlm.runtime.checkpoints.llamacpp_fixtures import chat_template, radixlm_cache, vocab_gguf
from radixlm.runtime.checkpoints.real_added_tokens import rename_added_tokens
from radixlm.runtime.checkpoints.real_configs import REAL_MODELS, RealModel
from radixlm.runtime.checkpoints.synthetic import _tensor_specs

# Bump when the generated content changes.
FORMAT_VERSION = 2  # 2: the real added tokens (real_added_tokens)
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
