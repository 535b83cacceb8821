"""``model_loader.SafetensorsFile``: the same tensors as the ``safetensors`` package for
every dtype a checkpoint uses, in data order, and a clear ``ValueError`` for a file that is not
safetensors or is cut short."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from radixlm.runtime.model.model_loader import SafetensorsFile
from safetensors.torch import load_file, save_file


def _sample() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"w.f32": torch.randn(5, 7, generator=g), "w.f16": torch.randn(3, 4, generator=g).half(),
            "w.bf16": torch.randn(6, 2, generator=g).bfloat16(), "ids.i64": torch.arange(9).reshape(3, 3),
            "q.i8": torch.randint(-127, 128, (4, 4), dtype=torch.int8, generator=g),
            "mask": torch.tensor([True, False, True]), "scalar": torch.tensor(2.5)}


def test_every_tensor_equals_the_safetensors_package(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file(_sample(), path, metadata={"format": "pt"})
    want = load_file(path)
    with SafetensorsFile(path) as f:
        assert f.metadata == {"format": "pt"} and sorted(f.keys()) == sorted(want)
        for name in f.keys():
            view = f.view(name)
            got = f.tensor(name, view)
            assert f.shape(name) == tuple(want[name].shape)
            assert got.dtype == want[name].dtype and torch.equal(got, want[name]), name
        rows = f.tensor("w.f32", f.view("w.f32")[1:3])  # a rank's slice, as tensor parallelism reads it
        assert torch.equal(rows, want["w.f32"][1:3])
        cols = f.tensor("w.f32", f.view("w.f32")[:, 2:5])
        assert torch.equal(cols, want["w.f32"][:, 2:5])


def test_keys_come_in_data_order(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file(_sample(), path)
    with SafetensorsFile(path) as f:
        offsets = [f._entries[name]["data_offsets"][0] for name in f.keys()]
    assert offsets == sorted(offsets)


@pytest.mark.parametrize("content,message", [
    (b"\x01\x02", "shorter than its header length"),
    (np.uint64(1 << 40).tobytes() + b"{}", "header length"),
    (np.uint64(4).tobytes() + b"nope", "bad header"),
])
def test_not_safetensors_is_a_value_error(tmp_path, content, message):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        SafetensorsFile(path)


def test_a_truncated_file_names_the_tensor(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"a": torch.zeros(4), "b": torch.ones(1000)}, path)
    path.write_bytes(path.read_bytes()[:-100])
    with SafetensorsFile(path) as f:
        assert torch.equal(f.tensor("a", f.view("a")), torch.zeros(4))
        with pytest.raises(ValueError, match="'b' runs past the end"):
            f.view("b")
