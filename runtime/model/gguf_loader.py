"""Load a GGUF file into ``LlamaForCausalLM`` with its weights kept in their block formats.

The file is read through ``gguf_reader.GGUFFile`` (a memory map): the metadata becomes the
``ModelConfig`` (``architectures``), each tensor name its HF name, and the model's
``checkpoint_layout()`` says where it goes. Per model parameter (a fused q/k/v or gate/up counts as
one), the file's parts are either all float32, then copied into the float parameter as an HF
checkpoint would be, or kept as ``BlockWeight``s (``kernels.gguf_blocks``) in a ``BlockLinear``,
``BlockEmbedding`` or ``BlockLMHead`` that replaces it: no float copy of a quantized weight is made.
1-D tensors (norms, biases) become float32 parameters. Each tensor's bytes are copied out of the
map once, and its pages of the map are released right after (``release_pages``), so loading holds
about the weights, not the file and the weights; the file is closed when loading ends.

llama.cpp's converter permutes the Q and K rows of ``llama`` files per head (ggml rotates adjacent
pairs, HF halves). A permutation of output rows moves whole rows, so it is undone on the raw block
rows of a quantized tensor as on a float one.

GGUF models run on the CPU in float32 activations, without tensor parallelism and without
``--quantization`` (they are quantized already): each of these raises ``ValueError`` naming it.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType, quants
from radixlm.kernels.gguf_blocks import SUPPORTED_TYPES, BlockWeight
from radixlm.runtime.load_progress import load_phase
from radixlm.runtime.model.architectures import ROPE_FREQS, GGUFWeights, gguf_architecture, hf_config
from radixlm.runtime.model.block_linear import BlockEmbedding, BlockLinear, BlockLMHead
from radixlm.runtime.model.gguf_reader import GGUFFile, GGUFTensor
from radixlm.runtime.model.llama import LlamaForCausalLM, TensorTarget
from radixlm.runtime.model.memory_placement import release_pages
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.parallel.distributed import TPGroup
from radixlm.runtime.model.parallel.layers import Linear, LoadedModules
from torch import nn

# (target, file tensor, HF name) of one file tensor
Piece = tuple[TensorTarget, GGUFTensor, str]


def check_gguf_options(dtype: str | torch.dtype | None, device: torch.device | str,
                       tp_size: int, quantization: str | None) -> None:
    """``ValueError`` naming the option a GGUF model cannot take."""
    if quantization is not None:
        raise ValueError(f"quantization {quantization!r}: a GGUF model is quantized already (its weights run in "
                         "their own block formats); drop --quantization")
    if tp_size > 1:
        raise ValueError(f"tp_size {tp_size}: tensor parallelism is not supported for GGUF models; use tp_size 1")
    if torch.device(device).type != "cpu":
        raise ValueError(f"device {str(device)!r}: GGUF models run on the CPU; pass --device cpu")
    if dtype not in (None, "auto", "float32", "float", "fp32", torch.float32):
        raise ValueError(f"dtype {dtype!r}: GGUF models compute in float32; use dtype auto or float32")


def load_gguf_model(path: str | os.PathLike, dtype: str | torch.dtype | None = "auto",
                    device: torch.device | str = "cpu", *, attention_backend: str = "torch",
                    tp: TPGroup | None = None,
                    quantization: str | None = None) -> tuple[LlamaForCausalLM, ModelConfig]:
    """Build the model a GGUF file describes and fill it from the file (see the module docstring).

    ``attention_backend`` is already resolved (``torch`` on the CPU). Raises ``FileNotFoundError`` for
    a missing file, ``ValueError`` for an unsupported architecture, tensor type or option, or bad tensors.
    """
    check_gguf_options(dtype, device, 1 if tp is None else tp.size, quantization)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    with GGUFFile(path) as reader:
        config = ModelConfig.from_dict(hf_config(reader))
        row = gguf_architecture(str(reader.metadata["general.architecture"]))
        model = row.model_class(config, dtype=torch.float32, device="cpu", attention_backend=attention_backend)
        model.install(fill_from_gguf(model, reader.tensors, row.gguf, path.name))
    return model.eval(), config


def fill_from_gguf(model: LlamaForCausalLM, tensors: dict[str, GGUFTensor], arch: GGUFWeights,
                   file_name: str) -> LoadedModules:
    """Copy the file's float tensors into ``model``'s parameters and return the block-format modules
    built from the others, for ``model.install`` to put in place of the float ones."""
    groups = _group_pieces(model, tensors, arch, file_name)
    total = sum(tensor.data.nbytes for pieces in groups.values() for _, tensor, _ in pieces)
    with load_phase(f"loading weights ({file_name})", total, "B") as bar:
        block_groups = []
        for pieces in groups.values():
            param = pieces[0][0].param
            if param.dim() == 1 or all(t.type_name == "F32" for _, t, _ in pieces):
                for target, tensor, hf_name in pieces:
                    rows = torch.from_numpy(_float_rows(tensor, hf_name, model.config, arch))
                    param.data[target.row:target.row + rows.shape[0]].copy_(rows.reshape(target.shape))
                    release_pages(tensor.data)
                    bar.update(tensor.data.nbytes)
            else:
                block_groups.append(sorted(pieces, key=lambda piece: piece[0].row))
        owners = _param_owners(model)
        built = LoadedModules()
        for pieces in block_groups:  # after the float ones: a BlockLinear takes its loaded bias
            _block_module(model, owners, pieces[0][0].param, _block_parts(pieces, model.config, arch), built)
            for _, tensor, _ in pieces:
                release_pages(tensor.data)
                bar.update(tensor.data.nbytes)
    return built


def _group_pieces(model: LlamaForCausalLM, tensors: dict[str, GGUFTensor], arch: GGUFWeights,
                  file_name: str) -> dict[int, list[Piece]]:
    """The file's tensors grouped by the parameter they fill; every check on names, shapes and types."""
    layout = model.checkpoint_layout()
    groups: dict[int, list[Piece]] = defaultdict(list)
    unsupported: dict[str, str] = {}
    for name, tensor in tensors.items():
        if name == ROPE_FREQS:  # read into the config's rope scaling
            continue
        hf_name = arch.hf_name(name)
        if hf_name is None or hf_name not in layout:
            raise ValueError(f"unexpected tensor {name!r} in {file_name}: not part of a {arch.name} model "
                             f"with {model.config.num_layers} layers")
        target = layout[hf_name]
        if tensor.shape != target.shape:
            raise ValueError(f"shape mismatch for tensor {name!r} in {file_name}: file has {list(tensor.shape)}, "
                             f"model expects {list(target.shape)}")
        if int(tensor.qtype) not in SUPPORTED_TYPES:
            unsupported.setdefault(tensor.type_name, name)
        groups[id(target.param)].append((target, tensor, hf_name))
    if unsupported:
        named = ", ".join(f"{kind} (e.g. {name!r})" for kind, name in unsupported.items())
        supported = ", ".join(sorted(GGMLQuantizationType(t).name for t in SUPPORTED_TYPES))
        raise ValueError(f"{file_name}: unsupported GGUF tensor type(s) {named}; supported: {supported}")
    loaded = {hf_name for pieces in groups.values() for _, _, hf_name in pieces}
    missing = sorted(set(layout) - loaded)
    if missing:
        shown = ", ".join(missing[:8]) + (f", ... ({len(missing)} in all)" if len(missing) > 8 else "")
        raise ValueError(f"{file_name} is missing tensor(s) for: {shown}")
    return groups


def _row_permutation(hf_name: str, rows: int, config: ModelConfig, arch: GGUFWeights) -> np.ndarray | None:
    """Indices that turn the file's Q/K rows (per head: adjacent pairs) back into HF's (per head: halves)."""
    if not arch.permuted_qk:
        return None
    if ".q_proj." in hf_name:
        heads = config.num_heads
    elif ".k_proj." in hf_name:
        heads = config.num_kv_heads
    else:
        return None
    # file row h*d + 2j + i holds HF row h*d + i*(d/2) + j
    return np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(-1)


def _float_rows(tensor: GGUFTensor, hf_name: str, config: ModelConfig, arch: GGUFWeights) -> np.ndarray:
    """A float (or 1-D) tensor's values as float32 ``[out(, in)]``, in HF row order."""
    values = np.asarray(quants.dequantize(tensor.data, tensor.qtype), dtype=np.float32).reshape(tensor.shape)
    if arch.norm_offset and hf_name.endswith("norm.weight"):
        values = values - arch.norm_offset
    perm = _row_permutation(hf_name, values.shape[0], config, arch)
    return np.array(values if perm is None else values[perm], dtype=np.float32, order="C")  # a writable copy


def _block_parts(pieces: list[Piece], config: ModelConfig, arch: GGUFWeights) -> list[BlockWeight]:
    """The raw block rows of a parameter's pieces (sorted by row), copied out of the map once, in HF
    row order; neighbours of one block type share one ``BlockWeight`` (one matmul)."""
    runs: list[list[Piece]] = []
    for piece in pieces:
        if runs and runs[-1][-1][1].qtype == piece[1].qtype:
            runs[-1].append(piece)
        else:
            runs.append([piece])
    parts = []
    for run in runs:
        rows = sum(t.shape[0] for _, t, _ in run)
        data = torch.empty((rows, run[0][1].data.shape[1]), dtype=torch.uint8)  # [rows, row_bytes]
        row = 0
        for _, tensor, hf_name in run:
            perm = _row_permutation(hf_name, tensor.shape[0], config, arch)
            raw = tensor.data if perm is None else tensor.data[perm]
            data[row:row + raw.shape[0]].numpy()[:] = raw
            row += raw.shape[0]
        parts.append(BlockWeight(int(run[0][1].qtype), data, (rows, run[0][1].shape[1])))
    return parts


def _param_owners(model: nn.Module) -> dict[int, tuple[str, Linear]]:
    """id(weight) of every float ``Linear`` -> (its qualified name in ``model``, the module)."""
    return {id(m.weight): (name, m) for name, m in model.named_modules() if isinstance(m, Linear)}


def _block_module(model: LlamaForCausalLM, owners: dict[int, tuple[str, Linear]], param: nn.Parameter,
                  parts: list[BlockWeight], built: LoadedModules) -> None:
    """Add to ``built`` the block-format module that replaces the float module or parameter ``param``."""
    if param is model.embed_tokens:
        (weight,) = parts
        built.embedding = BlockEmbedding(weight)
        if model.config.tie_word_embeddings:  # the head multiplies by the same blocks
            built.lm_head = BlockLMHead(weight)
    elif param is model.lm_head:
        (weight,) = parts
        built.lm_head = BlockLMHead(weight)
    else:
        name, linear = owners[id(param)]
        built.linears[name] = BlockLinear(parts, None if linear.bias is None else linear.bias.data)
