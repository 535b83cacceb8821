"""Load a local HF checkpoint directory into ``LlamaForCausalLM`` (or ``Gemma3ForCausalLM``).

Weights are read tensor by tensor through a memory map (``safetensors_reader``) and copied straight
into the (uninitialised) parameters, fusing q/k/v and gate/up on the way; each tensor's pages of the
map are released once copied, so no whole state dict, and not the file, is ever held. With
``--quantization int8`` each layer (and the embedding / head) is quantized as soon as all its
tensors are in (``quantize_as_loaded``), so its float weights are freed before the next
ones are read: loading peaks near the int8 model, not the float32 one.
Under tensor parallelism each rank copies only its slice of each tensor's view (``_part``), as
``checkpoint_layout()`` names it. Every parameter must be filled exactly by the checkpoint:
unknown, missing and misshapen tensors raise errors that name them.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch
from radixlm.runtime.gguf_path import gguf_file
from radixlm.runtime.load_progress import load_phase
from radixlm.runtime.model.attention import resolve_attention_backend
from radixlm.runtime.model.file_pages import release_pages
from radixlm.runtime.model.gemma3 import Gemma3ForCausalLM, text_tensor_name
from radixlm.runtime.model.llama import LlamaForCausalLM, TensorTarget
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.parallel.distributed import TPGroup
from radixlm.runtime.model.quantization import check_quantization, quantize_model
from radixlm.runtime.model.quantize_as_loaded import QuantizeAsLoaded
from radixlm.runtime.model.safetensors_reader import SafetensorsFile

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
    model = model_class(config)(config, dtype=run_dtype, device=device, attention_backend=backend, tp=tp)
    load_weights(model, files, QuantizeAsLoaded(model, quantization, backend))
    quantize_model(model, quantization, backend)  # whatever is left (nothing, once every tensor was read)
    return model.eval(), config


def model_class(config: ModelConfig) -> type[LlamaForCausalLM]:
    """The model class that runs ``config``'s architecture."""
    return Gemma3ForCausalLM if config.architecture.startswith("Gemma3") else LlamaForCausalLM


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
    with SafetensorsFile(file) as f:
        for stored in f.keys():
            bar.update()
            name = _model_name(stored, model)
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


def _model_name(stored: str, model: LlamaForCausalLM) -> str | None:
    """The model's name for a stored tensor (a multimodal Gemma 3's language model is renamed), or
    None for one the text model does not use (its vision tower)."""
    if model.config.architecture == "Gemma3ForConditionalGeneration":
        return text_tensor_name(stored)
    return stored


def _ignored(name: str, model: LlamaForCausalLM) -> bool:
    """Tensors a checkpoint may carry that the model does not use."""
    if name.endswith("rotary_emb.inv_freq"):  # recomputed from the config
        return True
    return name == "lm_head.weight" and model.lm_head is None  # tied: the embedding is the head
