"""GGUF files written from our synthetic checkpoints, some tensors quantized, for the GGUF loader's tests.

``write_gguf`` converts a tiny HF checkpoint as llama.cpp's converter would (``benchmarks/suites/
gguf_convert.py``'s names, tokenizer and Q/K permutation for ``llama``), quantizing the tensors that
``qtypes`` names with ``gguf.quants.quantize``. ``write_dequantized`` writes the HF checkpoint the
GGUF file stands for: every weight replaced by its quantized-then-dequantized values, so the two
models are the same model, one computing on the blocks and one in float32.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

# HF tensor suffix -> block type; the rest stay F32. Q/K/V and gate/up mix types inside one fused
# projection; down_proj's 688 inputs are not whole blocks of 32, so it is F16.
MIXED = {"embed_tokens.weight": T.Q8_0, "lm_head.weight": T.Q5_0, "q_proj.weight": T.Q8_0,
         "k_proj.weight": T.Q8_0, "v_proj.weight": T.Q4_0, "o_proj.weight": T.Q5_0,
         "gate_proj.weight": T.Q8_0, "up_proj.weight": T.Q4_0, "down_proj.weight": T.F16}


def _qtype(name: str, qtypes: dict[str, T]) -> T:
    return next((q for suffix, q in qtypes.items() if name.endswith(suffix)), T.F32)


def _round_trip(w: np.ndarray, qtype: T) -> np.ndarray:
    """``w`` as the file stores it: quantized with ``qtype``, dequantized to float32."""
    from gguf import quants

    if qtype == T.F32:
        return w
    return quants.dequantize(quants.quantize(w, qtype), qtype).astype(np.float32).reshape(w.shape)


def _quantize(w: np.ndarray, qtype: T) -> np.ndarray:
    """``w``'s blocks of ``qtype``; zero blocks for a type ``gguf`` cannot write (for the error tests)."""
    from gguf import GGML_QUANT_SIZES, quants

    try:
        return quants.quantize(np.ascontiguousarray(w), qtype)
    except NotImplementedError:
        block, size = GGML_QUANT_SIZES[qtype]
        return np.zeros((w.shape[0], w.shape[1] // block * size), dtype=np.uint8)


def write_gguf(model_dir: str | Path, out: str | Path, qtypes: dict[str, T] | None = None, *,
               tie: bool = False, chat_template: str | None = None, arch: str | None = None,
               split_max_tensors: int = 0, sampling: dict[str, float] | None = None) -> Path:
    """Write ``out`` from the checkpoint in ``model_dir``; ``tie`` drops ``output.weight`` (a tied head).
    ``sampling`` adds ``general.sampling.<key>`` values (``top_k`` as uint32, the others as float32).
    ``split_max_tensors`` > 0 writes split parts ``OUT-00001-of-0000N.gguf`` as llama-gguf-split does."""
    import gguf
    from suites.gguf_convert import ARCHS, _add_tokenizer, _load_float32, _permute_rope, gguf_name

    model_dir, out = Path(model_dir), Path(out)
    config = json.loads((model_dir / "config.json").read_text())
    arch = arch or ARCHS[config["model_type"]]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    writer = gguf.GGUFWriter(str(out), arch, split_max_tensors=split_max_tensors)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(config["head_dim"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(config["rope_theta"])
    _add_tokenizer(writer, model_dir, config)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    for key, value in (sampling or {}).items():
        add = writer.add_uint32 if key == "top_k" else writer.add_float32
        add(f"general.sampling.{key}", value)
    tensors = _load_float32(model_dir)
    if tie:
        tensors.pop("lm_head.weight", None)
    for name, w in tensors.items():
        if arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            w = _permute_rope(w, heads)
        elif arch == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            w = _permute_rope(w, kv_heads)
        qtype = _qtype(name, qtypes or {})
        if qtype == T.F32:
            writer.add_tensor(gguf_name(name), np.ascontiguousarray(w))
        else:
            writer.add_tensor(gguf_name(name), _quantize(w, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def write_dequantized(model_dir: str | Path, out_dir: str | Path, qtypes: dict[str, T] | None = None, *,
                      tie: bool = False) -> Path:
    """The HF checkpoint of the model ``write_gguf(model_dir, ..., qtypes, tie=tie)`` describes."""
    from safetensors.torch import save_file
    from suites.gguf_convert import _load_float32

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(model_dir / name, out_dir / name)
    config = json.loads((model_dir / "config.json").read_text())
    config["tie_word_embeddings"] = tie
    (out_dir / "config.json").write_text(json.dumps(config))
    tensors = _load_float32(model_dir)
    if tie:
        tensors.pop("lm_head.weight", None)
    weights = {name: torch.from_numpy(np.ascontiguousarray(_round_trip(w, _qtype(name, qtypes or {}))))
               for name, w in tensors.items()}
    save_file(weights, str(out_dir / "model.safetensors"))
    return out_dir
