"""Facts about a loaded model's weights for the start-up line: how many, in what format, on how many threads."""

from __future__ import annotations

from collections import Counter

import torch
from radixlm.kernels import cpu_native
from radixlm.kernels.gguf_blocks import BlockWeight
from torch import nn

_WEIGHT_DTYPES = (torch.int8, torch.uint8, torch.float32, torch.float16, torch.bfloat16)


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
        if t.dtype in _WEIGHT_DTYPES and key not in seen:
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
