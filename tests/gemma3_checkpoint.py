"""Tiny Gemma 3 text checkpoints written by transformers, for the model and engine tests.

Two sliding layers with a window of ``WINDOW`` around one global layer, ``head_dim * heads !=
hidden``, random norm weights (Gemma scales by ``1 + w``): prompts longer than the window make both
RoPE bases, the window mask and the sandwich norms all move the logits.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

WINDOW = 8
TINY = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "query_pre_attn_scalar": 24,
        "sliding_window": WINDOW, "max_position_embeddings": 256,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def write_gemma3_checkpoint(path: str | Path, extra: dict | None = None, seed: int = 0,
                            tokenizer_from: str | Path | None = None) -> Path:
    """Save a tiny ``Gemma3ForCausalLM`` (``TINY`` updated by ``extra``) at ``path``; with
    ``tokenizer_from`` (a synthetic checkpoint), its tokenizer files and vocabulary size too."""
    extra = dict(extra or {})
    if tokenizer_from is not None:
        source = json.loads((Path(tokenizer_from) / "config.json").read_text())
        extra.setdefault("vocab_size", source["vocab_size"])
    config = Gemma3TextConfig(**{**TINY, **extra})
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(-0.3, 0.3)  # the scale is 1 + w
            elif "embed_tokens" in name:
                p.normal_(0.0, 0.3)  # times sqrt(hidden) = 8 on lookup
            else:
                p.normal_(0.0, 1.5 / p.shape[1] ** 0.5)
    model.save_pretrained(path, safe_serialization=True)
    if tokenizer_from is not None:
        for name in TOKENIZER_FILES:
            shutil.copy(Path(tokenizer_from) / name, Path(path) / name)
    return Path(path)
