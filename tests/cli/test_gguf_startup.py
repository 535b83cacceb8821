"""``radixlm serve --model-path`` with GGUF files: what cannot be served is one ``radixlm: error:`` line
naming it (exit code 2), as for any start-up failure (``test_startup_errors.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as T
from gguf_files import write_gguf
from test_startup_errors import _one_error_line, _serve


@pytest.fixture(scope="module")
def tiny_gguf(checkpoint, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gguf-cli")
    return write_gguf(checkpoint("qwen2", "tiny"), root / "tiny.gguf", {"q_proj.weight": T.Q8_0})


def test_a_folder_with_two_gguf_files_names_both(tiny_gguf: Path, tmp_path: Path):
    for name in ("a.gguf", "b.gguf"):
        shutil.copy(tiny_gguf, tmp_path / name)
    line = _one_error_line(_serve("--port", "0", "--model-path", str(tmp_path), timeout=60))
    assert "2 GGUF files (a.gguf, b.gguf)" in line, line


def test_int8_quantization_of_a_gguf_model_is_refused(tiny_gguf: Path):
    line = _one_error_line(_serve("--port", "0", "--model-path", str(tiny_gguf), "--quantization", "int8"))
    assert "quantization 'int8': a GGUF model is quantized already" in line, line


def test_an_unsupported_architecture_is_named(tmp_path: Path, checkpoint):
    path = write_gguf(checkpoint("qwen2", "tiny"), tmp_path / "x.gguf", arch="starcoder2")
    line = _one_error_line(_serve("--port", "0", "--model-path", str(path)))
    assert "GGUF architecture 'starcoder2' is not supported" in line, line


def test_the_start_up_facts_of_a_gguf_model(tiny_gguf: Path, checkpoint):
    """The start-up line's parameter count and weight format see the block weights: as many parameters
    as the float checkpoint the file was written from, and the file's block types by share."""
    import torch
    from radixlm.runtime.model.model_loader import load_model, parameter_count, weight_format

    gguf_model, _ = load_model(str(tiny_gguf))
    float_model, _ = load_model(str(checkpoint("qwen2", "tiny")))
    assert parameter_count(gguf_model) == parameter_count(float_model)
    fmt = weight_format(None, torch.float32, gguf_model)
    assert fmt.startswith("GGUF ") and "Q8_0" in fmt and fmt.endswith("%"), fmt
    assert weight_format(None, torch.float32, float_model) == "float32"
