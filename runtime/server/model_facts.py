"""What the served model is, for the routes that describe it (Ollama's ``/api/tags``, ``/api/show`` and
``/api/ps``), and its fill-in-the-middle markers (``suffix`` on ``/api/generate`` and ``/v1/completions``).

The family comes from the checkpoint's architecture (``Qwen2ForCausalLM`` -> ``qwen2``); the
parameter count is computed from the config's shapes (embeddings, attention and MLP projections,
norms, the LM head unless tied), so it is exact for the llama-style decoders served here; the size
is the bytes of the checkpoint's weight files.

Fill-in-the-middle needs the vocabulary's three markers, each one token: Qwen2.5-Coder's
``<|fim_prefix|>`` / ``<|fim_suffix|>`` / ``<|fim_middle|>`` or StarCoder's ``<fim_prefix>`` ...; the
prompt is prefix-suffix-middle (PSM), the order both families were trained on.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from radixlm.runtime.server.http_errors import bad_request
from radixlm.runtime.server.state import ServerState

WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt")
FIM_MARKERS = (("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder
               ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"))  # StarCoder, SantaCoder


def fim_markers(tokenizer: Any) -> tuple[str, str, str] | None:
    """The vocabulary's (prefix, suffix, middle) markers, each one token; None without them."""
    for markers in FIM_MARKERS:
        if all(len(tokenizer.encode(m)) == 1 for m in markers):
            return markers
    return None


def fim_prompt(tokenizer: Any, prefix: str, suffix: str, param: str = "suffix") -> str:
    """The fill-in-the-middle prompt for the code between ``prefix`` and ``suffix`` (a 400 naming
    ``param`` when the vocabulary has no markers)."""
    markers = fim_markers(tokenizer)
    if markers is None:
        raise bad_request(f"'{param}' (fill-in-the-middle) needs a model whose vocabulary has fill-in-the-middle "
                          f"tokens ({' '.join(FIM_MARKERS[0])}, as Qwen2.5-Coder's); this model has none",
                          param=param, code="unsupported_parameter")
    return f"{markers[0]}{prefix}{markers[1]}{suffix}{markers[2]}"


@dataclass(frozen=True)
class ModelFacts:
    """The served model's name, family, size and shapes (None: not known for this checkpoint)."""

    name: str
    family: str
    format: str
    parameter_count: int | None
    size_bytes: int
    modified_at: str
    context_len: int
    quantization: str
    shapes: dict[str, int]


def model_facts(state: ServerState) -> ModelFacts:
    """The facts of ``state``'s model (reads the checkpoint's file sizes; no weights are loaded)."""
    cfg = state.engine.model_config
    args = state.engine.server_args
    files = _weight_files(state.model_path)
    shapes = {k: int(v) for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                                  "intermediate_size", "vocab_size") if isinstance(v := getattr(cfg, k, None), int)}
    mtime = max((os.path.getmtime(f) for f in files), default=os.path.getmtime(state.model_path)
                if os.path.exists(state.model_path) else 0.0)
    quant = args.quantization or str(getattr(cfg, "torch_dtype", None) or args.dtype)
    return ModelFacts(
        name=state.model_name, family=family(cfg.architecture),
        format="gguf" if any(f.endswith(".gguf") for f in files) else "safetensors",
        parameter_count=parameter_count(cfg), size_bytes=sum(os.path.getsize(f) for f in files),
        modified_at=datetime.fromtimestamp(mtime, timezone.utc).isoformat(), context_len=state.context_len,
        quantization=quant.upper().replace("FLOAT", "F").replace("BFLOAT", "BF"), shapes=shapes)


def family(architecture: str) -> str:
    """``LlamaForCausalLM`` -> ``llama``, ``Gemma3ForCausalLM`` -> ``gemma3``."""
    return re.sub(r"For(CausalLM|ConditionalGeneration)$", "", architecture).lower() or "unknown"


def parameter_count(cfg: Any) -> int | None:
    """Parameters of a llama-style decoder from its config (None when a shape is missing)."""
    try:
        h, layers, inter, vocab = cfg.hidden_size, cfg.num_layers, cfg.intermediate_size, cfg.vocab_size
        q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    except AttributeError:
        return None
    attn = h * q + 2 * h * kv + q * h
    if getattr(cfg, "qkv_bias", False):
        attn += q + 2 * kv
    if getattr(cfg, "o_bias", False):
        attn += h
    if getattr(cfg, "qk_norm", False):
        attn += 2 * cfg.head_dim
    mlp = 3 * h * inter + (2 * inter + h if getattr(cfg, "mlp_bias", False) else 0)
    per_layer = attn + mlp + 2 * h  # two RMS norms
    head = 0 if getattr(cfg, "tie_word_embeddings", False) else vocab * h
    return vocab * h + layers * per_layer + h + head


def parameter_size(count: int | None) -> str:
    """``494032768`` -> ``"494.03M"`` (Ollama's ``parameter_size``)."""
    if count is None:
        return "unknown"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= scale:
            return f"{count / scale:.2f}{unit}"
    return str(count)


def _weight_files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        return []
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(WEIGHT_SUFFIXES))
