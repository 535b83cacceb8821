"""Load a local HF checkpoint directory into its architecture's model class (``architectures``).

Weights are read tensor by tensor through a memory map (``SafetensorsFile``, below) and copied straight
into the (uninitialised) parameters, fusing q/k/v and gate/up on the way; each tensor's pages of the
map are released once copied, so no whole state dict, and not the file, is ever held. With
``--quantization int8`` each layer (and the embedding / head) is quantized as soon as all its
tensors are in (``quantization.QuantizeAsLoaded``), so its float weights are freed before the next
ones are read: loading peaks near the int8 model, not the float32 one.
Under tensor parallelism each rank copies only its slice of each tensor's view (``_part``), as
``checkpoint_layout()`` names it. Every parameter must be filled exactly by the checkpoint:
unknown, missing and misshapen tensors raise errors that name them.

``SafetensorsFile``: a safetensors file read through one memory map, tensor by tensor, its pages
released as it goes.

The format is an 8-byte little-endian header length, a JSON header (name -> ``dtype``, ``shape``,
``data_offsets`` relative to the data, plus an optional ``__metadata__``) and the raw little-endian
tensor data. ``safetensors.safe_open`` maps the file too but keeps every page it touched resident
until the file is closed, so loading a checkpoint held the file and the model at once (a float32
0.5B model peaked at ~4 GB for ~2 GB of weights). Here each tensor is a numpy view of the map,
copied into its parameter, then its pages are released (``memory_placement.release_pages``).

``parameter_count``, ``weight_format``, ``threads``: facts about a loaded model's weights for the
start-up line: how many, in what format, on how many threads.
"""

from __future__ import annotations

import json
import os
import struct
import warnings
from collections import Counter
from typing import Any

import numpy as np
import torch
from radixlm.kernels import cpu_native
from radixlm.kernels.gguf_blocks import BlockWeight
from radixlm.runtime.gguf_path import gguf_file
from radixlm.runtime.load_progress import load_phase
from radixlm.runtime.model.architectures import architecture
from radixlm.runtime.model.attention import resolve_attention_backend
from radixlm.runtime.model.llama import LlamaForCausalLM, TensorTarget
from radixlm.runtime.model.memory_placement import release_pages
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.parallel.distributed import TPGroup
from radixlm.runtime.model.quantization import QuantizeAsLoaded, check_quantization, quantize_model
from torch import nn

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device | str,
                  checkpoint_dtype: str | None = None) -> torch.dtype:
    """The dtype to run in.

    An explicit ``dtype`` (a ``torch.dtype`` or a name in ``DTYPES``) wins. ``None``/``"auto"``:
    float32 on CPU; on CUDA the checkpoint's ``torch_dtype`` when it is float16/bfloat16, else
    bfloat16.
    """
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype {dtype} is not supported; use float32, float16 or bfloat16")
        return dtype
    if dtype is not None and dtype != "auto":
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of auto, {', '.join(DTYPES)}")
        return DTYPES[dtype]
    if torch.device(device).type != "cuda":
        return torch.float32
    if checkpoint_dtype in ("float16", "bfloat16"):
        return DTYPES[checkpoint_dtype]
    return torch.bfloat16


def weight_files(path: str | os.PathLike) -> list[str]:
    """The safetensors files of a checkpoint: the shards its index names, or ``model.safetensors``."""
    path = os.fspath(path)
    index_file = os.path.join(path, INDEX_FILE)
    if os.path.isfile(index_file):
        with open(index_file, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index_file} has no 'weight_map'")
        files = [os.path.join(path, name) for name in sorted(set(weight_map.values()))]
        for file in files:
            if not os.path.isfile(file):
                raise FileNotFoundError(f"weight shard {os.path.basename(file)} named in {INDEX_FILE} "
                                        f"not found: {file}")
        return files
    single = os.path.join(path, SINGLE_FILE)
    if os.path.isfile(single):
        return [single]
    raise FileNotFoundError(f"no safetensors weights in {path}: expected {SINGLE_FILE} or {INDEX_FILE}")


def load_model(path: str | os.PathLike, dtype: str | torch.dtype | None = "auto",
               device: torch.device | str = "cpu", *,
               attention_backend: str = "auto", tp: TPGroup | None = None,
               quantization: str | None = None) -> tuple[LlamaForCausalLM, ModelConfig]:
    """Build the model for ``path``'s ``config.json`` and fill it from its safetensors weights; a GGUF
    file (or a folder holding one) is loaded by ``gguf_loader.load_gguf_model`` instead.

    ``dtype``: see ``resolve_dtype``. ``attention_backend``: ``auto`` (triton on CUDA, torch
    otherwise), ``torch`` or ``triton``. ``tp``: build and read only this rank's shard (default:
    the whole model). ``quantization``: ``None`` (the float weights) or ``"int8"`` (weight-only, per
    output channel, applied after loading: ``quantization.quantize_model``; its matmuls use the
    attention backend's kernels). Raises ``FileNotFoundError`` for a missing directory, config or
    weight file, ``ValueError`` for an unsupported architecture or quantization, a ``tp`` size the
    model cannot be split by, or bad tensors.
    """
    check_quantization(quantization)
    gguf = gguf_file(path)
    if gguf is not None:  # a GGUF file, or a folder holding one: its weights stay in their block formats
        from radixlm.runtime.model.gguf_loader import load_gguf_model

        backend = resolve_attention_backend(attention_backend, device)
        return load_gguf_model(gguf, dtype, device, attention_backend=backend, tp=tp, quantization=quantization)
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"model directory not found: {path}")
    config = ModelConfig.from_path(path)
    files = weight_files(path)
    device = torch.device(device)
    run_dtype = resolve_dtype(dtype, device, config.torch_dtype)
    backend = resolve_attention_backend(attention_backend, device)
    model = architecture(config.architecture).model_class(config, dtype=run_dtype, device=device, attention_backend=backend, tp=tp)
    load_weights(model, files, QuantizeAsLoaded(model, quantization, backend))
    quantize_model(model, quantization, backend)  # whatever is left (nothing, once every tensor was read)
    return model.eval(), config


def load_weights(model: LlamaForCausalLM, files: list[str], quantizer: QuantizeAsLoaded | None = None) -> None:
    """Copy every tensor of ``files`` into its place in ``model.checkpoint_layout()``; ``quantizer``
    hears of each one copied (it quantizes a layer once it is complete)."""
    layout = model.checkpoint_layout()
    expected = set(layout)
    loaded: set[str] = set()
    with load_phase(f"loading weights ({len(files)} safetensors file{'s' if len(files) != 1 else ''})",
                    len(layout), "tensor", show=model.tp.rank == 0) as bar:
        for file in files:
            _load_file(model, file, layout, loaded, bar, quantizer)
    missing = sorted(expected - loaded)
    if missing:
        shown = ", ".join(missing[:8]) + (f", ... ({len(missing)} in all)" if len(missing) > 8 else "")
        raise ValueError(f"checkpoint is missing tensor(s): {shown}")


def _load_file(model: LlamaForCausalLM, file: str, layout: dict[str, TensorTarget], loaded: set[str], bar: Any,
               quantizer: QuantizeAsLoaded | None) -> None:
    """Copy one safetensors file's tensors into their places (``bar`` counts them)."""
    expected = layout.keys()
    tensor_name = architecture(model.config.architecture).tensor_name  # a multimodal checkpoint's renaming
    with SafetensorsFile(file) as f:
        for stored in f.keys():
            bar.update()
            name = tensor_name(stored)
            if name is None or _ignored(name, model):
                continue
            if name in loaded:
                raise ValueError(f"tensor {name!r} appears twice in the checkpoint (again in "
                                 f"{os.path.basename(file)})")
            if name not in expected:
                raise ValueError(f"unexpected tensor {name!r} in {os.path.basename(file)}: not part of "
                                 f"a {model.config.architecture} with {model.config.num_layers} layers")
            target = layout[name]
            actual = f.shape(stored)
            if actual != target.shape:
                raise ValueError(f"shape mismatch for tensor {name!r} in {os.path.basename(file)}: "
                                 f"checkpoint has {list(actual)}, model expects {list(target.shape)}")
            whole = f.view(stored)
            data = f.tensor(stored, _part(whole, target))
            target.param.data[target.row:target.row + data.shape[0]].copy_(data)
            release_pages(whole)
            loaded.add(name)
            if quantizer is not None:
                quantizer.loaded(name, layout)


def _part(whole: np.ndarray, target: TensorTarget) -> np.ndarray:
    """The part of a tensor's view this rank needs (a slice of ``dim``, or all of it)."""
    if target.dim is None:
        return whole
    end = target.start + target.length
    return whole[target.start:end] if target.dim == 0 else whole[:, target.start:end]


def _ignored(name: str, model: LlamaForCausalLM) -> bool:
    """Tensors a checkpoint may carry that the model does not use."""
    if name.endswith("rotary_emb.inv_freq"):  # recomputed from the config
        return True
    return name == "lm_head.weight" and model.lm_head is None  # tied: the embedding is the head


# safetensors dtype -> (numpy storage type, torch dtype)
SAFETENSORS_DTYPES: dict[str, tuple[type, torch.dtype]] = {
    "F64": (np.float64, torch.float64), "F32": (np.float32, torch.float32), "F16": (np.float16, torch.float16),
    "BF16": (np.uint16, torch.bfloat16), "I64": (np.int64, torch.int64), "I32": (np.int32, torch.int32),
    "I16": (np.int16, torch.int16), "I8": (np.int8, torch.int8), "U8": (np.uint8, torch.uint8),
    "BOOL": (np.bool_, torch.bool),
}
MAX_HEADER_BYTES = 100 << 20  # the format's own bound


class SafetensorsFile:
    """The tensors of one safetensors file: ``keys()``, ``shape(name)``, ``view(name)`` (a numpy
    view of the map, raw storage type) and ``tensor(view)`` (a torch tensor over it, not copied).
    ``ValueError`` names a file that is not safetensors or a tensor past its end."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        if len(self._map) < 8:
            raise ValueError(f"{self.path} is not a safetensors file (shorter than its header length)")
        (size,) = struct.unpack_from("<Q", self._map, 0)
        if size > min(MAX_HEADER_BYTES, len(self._map) - 8):
            raise ValueError(f"{self.path} is not a safetensors file (header length {size})")
        try:
            header = json.loads(bytes(self._map[8:8 + size]))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{self.path} is not a safetensors file (bad header: {e})") from None
        self.metadata: dict = header.pop("__metadata__", None) or {}
        self._entries: dict[str, dict] = header
        self._data = 8 + size

    def keys(self) -> list[str]:
        """The tensor names, in the file's data order."""
        return sorted(self._entries, key=lambda name: self._entries[name]["data_offsets"][0])

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entries[name]["shape"])

    def view(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a read-only numpy view of the map (BF16 as uint16)."""
        entry = self._entries[name]
        if entry["dtype"] not in SAFETENSORS_DTYPES:
            raise ValueError(f"{self.path}: tensor {name!r} has unsupported dtype {entry['dtype']}")
        np_type, _ = SAFETENSORS_DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        if self._data + end > len(self._map):
            raise ValueError(f"{self.path}: tensor {name!r} runs past the end of the file (truncated?)")
        raw = self._map[self._data + begin:self._data + end]
        return raw.view(np_type).reshape(entry["shape"])

    def tensor(self, name: str, view: np.ndarray) -> torch.Tensor:
        """A torch tensor over ``view`` (of ``name``), in the file's dtype; not a copy (read only)."""
        _, dtype = SAFETENSORS_DTYPES[self._entries[name]["dtype"]]
        with warnings.catch_warnings():  # the map is read-only; this tensor is only ever read
            warnings.simplefilter("ignore", UserWarning)
            out = torch.from_numpy(view)
        return out.view(dtype) if dtype == torch.bfloat16 else out

    def close(self) -> None:
        """Drop this object's reference to the map (views still held keep it open)."""
        self._map = None

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_WEIGHT_SAFETENSORS_DTYPES = (torch.int8, torch.uint8, torch.float32, torch.float16, torch.bfloat16)


def block_weights(model: nn.Module) -> list[BlockWeight]:
    """The GGUF block weights a model holds (``BlockLinear`` parts, block embeddings and LM heads),
    each once (a tied embedding and LM head share one)."""
    found: dict[int, BlockWeight] = {}
    for module in model.modules():
        held = list(getattr(module, "parts", None) or ()) + [getattr(module, "weight", None)]
        for w in held:
            if isinstance(w, BlockWeight):
                found.setdefault(w.data.untyped_storage().data_ptr() + w.data.storage_offset(), w)
    return list(found.values())


def parameter_count(model: nn.Module) -> int:
    """Elements of the weights: float parameters, integer (quantized) buffers, GGUF block weights'
    logical elements and their float biases, each storage once."""
    seen: set[int] = set()
    total = 0
    for t in (*model.parameters(), *(b for b in model.buffers() if not b.is_floating_point())):
        key = t.untyped_storage().data_ptr()
        if t.dtype in _WEIGHT_SAFETENSORS_DTYPES and key not in seen:
            seen.add(key)
            total += t.numel()
    biases = sum(m.bias.numel() for m in model.modules()  # a BlockLinear's float bias is a buffer
                 if getattr(m, "parts", None) and isinstance(getattr(m, "bias", None), torch.Tensor))
    return total + biases + sum(w.shape[0] * w.shape[1] for w in block_weights(model))


def weight_format(quantization: str | None, dtype: torch.dtype, model: nn.Module | None = None) -> str:
    """The weights' storage format as the start-up line names it: ``float32``, ``int8 (weight-only)``, or
    for a GGUF model its block types by share of the weights (``GGUF Q5_0 60%, Q8_0 27%, Q6_K 13%``)."""
    blocks = block_weights(model) if model is not None else []
    if blocks:
        shares = Counter()
        for w in blocks:
            shares[w.type_name] += w.shape[0] * w.shape[1]
        total = sum(shares.values())
        return "GGUF " + ", ".join(f"{name} {100 * n / total:.0f}%" for name, n in shares.most_common())
    if quantization == "int8":
        return "int8 (weight-only)"
    return str(dtype).removeprefix("torch.")


def kernels() -> str:
    """The CPU kernels the model runs on, as the start-up line names them (``cpu_native.describe()``)."""
    return cpu_native.describe()


def threads() -> int:
    """The threads torch's CPU kernels (and ours, which follow it) run on."""
    return torch.get_num_threads()
