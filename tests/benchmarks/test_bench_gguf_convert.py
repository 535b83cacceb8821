"""``benchmarks/suites/gguf_convert.py``: Llama and Qwen2 checkpoints to float32 GGUF (read back with gguf).

llama.cpp's ``llama`` architecture wants Q/K permuted to adjacent RoPE pairs; its ``qwen2`` one rotates
halves like HF, so Qwen2's Q/K go unchanged, with the q/k/v biases beside them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from radixlm.runtime.checkpoints.synthetic import checkpoint_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _read(model_dir: str, tmp_path: Path) -> tuple[str, dict[str, np.ndarray]]:
    from gguf import GGUFReader
    from suites.gguf_convert import convert

    reader = GGUFReader(str(convert(model_dir, tmp_path / "model.gguf")))
    field = reader.fields["general.architecture"]
    arch = bytes(field.parts[field.data[0]]).decode()
    return arch, {t.name: np.asarray(t.data) for t in reader.tensors}


def _hf(model_dir: str, name: str) -> np.ndarray:
    from safetensors import safe_open

    with safe_open(str(Path(model_dir) / "model.safetensors"), framework="pt") as f:
        return f.get_tensor(name).float().numpy()


@pytest.mark.slow  # ~20 s each on a quiet machine: the GGUF writer and reader in Python
@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_convert_keeps_or_permutes_q_and_adds_biases(arch: str, tmp_path: Path) -> None:
    model_dir = checkpoint_path(arch, "tiny")
    gguf_arch, tensors = _read(model_dir, tmp_path)
    assert gguf_arch == arch
    q_hf = _hf(model_dir, "model.layers.0.self_attn.q_proj.weight")
    q = tensors["blk.0.attn_q.weight"].reshape(q_hf.shape)
    assert np.array_equal(q, q_hf) == (arch == "qwen2")  # llama: permuted, same values
    assert np.array_equal(np.sort(q, axis=None), np.sort(q_hf, axis=None))
    if arch == "qwen2":
        bias = _hf(model_dir, "model.layers.0.self_attn.k_proj.bias")
        assert np.array_equal(tensors["blk.0.attn_k.bias"].reshape(bias.shape), bias)
    else:
        assert "blk.0.attn_k.bias" not in tensors
    assert "output.weight" in tensors


def test_convert_rejects_other_architectures(tmp_path: Path) -> None:
    from suites.gguf_convert import convert

    with pytest.raises(ValueError, match="model_type 'qwen3'"):
        convert(checkpoint_path("qwen3", "tiny"), tmp_path / "x.gguf")


def test_run_accepts_the_real_shape_sizes_and_names_a_wrong_arch() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_run_for_sizes", Path(__file__).resolve().parents[2]
                                                  / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    args = run.build_parser().parse_args(["--suite", "agent", "--arch", "qwen2", "--size", "0.5b"])
    assert (args.arch, args.size) == ("qwen2", "0.5b")
    with pytest.raises(ValueError, match="no real-shape model for arch='llama' size='0.5b'"):
        run.run_suites(run.build_parser().parse_args(["--suite", "agent", "--size", "0.5b"]))
