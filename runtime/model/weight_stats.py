"""Facts about a loaded model's weights for the start-up line: how many, in what format, on how many threads."""

from __future__ import annotations

import torch
from torch import nn

_WEIGHT_DTYPES = (torch.int8, torch.uint8, torch.float32, torch.float16, torch.bfloat16)


def parameter_count(model: nn.Module) -> int:
    """Elements of the weights: float parameters plus integer (quantized) buffers, each storage once."""
    seen: set[int] = set()
    total = 0
    for t in (*model.parameters(), *(b for b in model.buffers() if not b.is_floating_point())):
        key = t.untyped_storage().data_ptr()
        if t.dtype in _WEIGHT_DTYPES and key not in seen:
            seen.add(key)
            total += t.numel()
    return total


def weight_format(quantization: str | None, dtype: torch.dtype) -> str:
    """The weights' storage format as the start-up line names it (``float32``, ``int8 (weight-only)``)."""
    if quantization == "int8":
        return "int8 (weight-only)"
    return str(dtype).removeprefix("torch.")


def threads() -> int:
    """The threads torch's CPU kernels (and ours, which follow it) run on."""
    return torch.get_num_threads()
