"""Loading's memory (``model_loader``, ``SafetensorsFile``, ``QuantizeAsLoaded``): each
tensor's file pages are released once copied, and ``--quantization int8`` quantizes each layer as
soon as it is in, with the same int8 weights as quantizing after loading."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from radixlm.runtime.checkpoints.synthetic import make_checkpoint
from radixlm.runtime.model import model_loader, quantization
from radixlm.runtime.model.model_loader import load_model
from radixlm.runtime.model.quantization import quantize_model
from safetensors.torch import load_file, save_file


def _int8_state(model) -> dict[str, torch.Tensor]:
    return {name: t for name, t in [*model.named_parameters(), *model.named_buffers()]}


def _split_in_two(path) -> None:
    """Rewrite ``path``'s model.safetensors as two shards with an index, layers interleaved."""
    tensors = load_file(path / "model.safetensors")
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in shards.items():
        save_file({n: tensors[n].contiguous() for n in part}, path / file)
    weight_map = {n: file for file, part in shards.items() for n in part}
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (path / "model.safetensors").unlink()


@pytest.mark.parametrize("arch,tied,sharded", [("qwen2", True, False), ("llama", False, True),
                                               ("qwen3", False, False)])
def test_int8_while_loading_equals_int8_after_loading(tmp_path, arch, tied, sharded):
    path = make_checkpoint(tmp_path / "m", arch, "tiny", overrides={"tie_word_embeddings": tied,
                                                                    "num_hidden_layers": 3})
    if sharded:
        _split_in_two(path)
    after, _ = load_model(path, "float32")
    quantize_model(after, "int8")
    during, _ = load_model(path, "float32", quantization="int8")
    want, got = _int8_state(after), _int8_state(during)
    assert sorted(want) == sorted(got)
    for name, tensor in want.items():
        assert torch.equal(tensor, got[name]), name


def test_each_layer_is_quantized_before_the_last_tensor_is_read(tmp_path, monkeypatch):
    path = make_checkpoint(tmp_path / "m", "llama", "tiny", overrides={"num_hidden_layers": 3})
    events: list[str] = []
    real_copy = model_loader.release_pages
    monkeypatch.setattr(model_loader, "release_pages", lambda view: (events.append("read"), real_copy(view)))

    def spy(kind: str, real):  # records the calls that built something (quantize_model's last pass builds nothing)
        def call(*args, **kwargs):
            built = real(*args, **kwargs)
            if built.linears or built.embedding is not None:
                events.append(kind)
            return built
        return call

    monkeypatch.setattr(quantization, "quantize_layer", spy("layer", quantization.quantize_layer))
    monkeypatch.setattr(quantization, "quantize_head", spy("head", quantization.quantize_head))
    load_model(path, "float32", quantization="int8")
    assert events.count("layer") == 3 and events.count("head") == 1
    first_layer = events.index("layer")
    assert "read" in events[first_layer:]  # quantized while later tensors were still to be read


# In a fresh process: the peak resident memory that load_model adds, and the float32 weights' size.
_PEAK = """
import json, sys, torch
from radixlm.runtime.model.model_loader import load_model
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
base = hwm()
model, _ = load_model(sys.argv[1], "float32", quantization=None if sys.argv[2] == "none" else sys.argv[2])
print(json.dumps({"added": hwm() - base}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_loading_peaks_near_the_weights_it_keeps(tmp_path):
    path = make_checkpoint(tmp_path / "m", "llama", "small", overrides={"num_hidden_layers": 8,
                                                                     "tie_word_embeddings": True})
    weights = sum(t.numel() * 4 for t in load_file(path / "model.safetensors").values())  # float32 bytes

    def added(quantization: str) -> float:
        out = subprocess.run([sys.executable, "-c", _PEAK, str(path), quantization], capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["added"] / weights

    # Before: the file's pages stayed resident next to the copy (2x), and int8 held the float model
    # and its int8 copy (1.25x). Now: the weights once, and int8 a fraction of the float32 weights.
    assert added("none") < 1.2  # measured 1.02
    assert added("int8") < 0.65  # measured 0.53: the int8 weights, one float layer, the float embedding
