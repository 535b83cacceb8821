"""Write a bfloat16 ``.safetensors`` file one tensor at a time (numpy has no bfloat16 dtype).

Real-shape checkpoints hold up to 1.2 B parameters: building them all in float32 first would take
5 GB, so tensors are generated, rounded and written one by one, with the header computed up front
from the shapes alone.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np


def to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even as torch does."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)


def _header(shapes: dict[str, tuple[int, ...]]) -> bytes:
    entries: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in shapes.items():
        size = 2 * int(np.prod(shape, dtype=np.int64))
        entries[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    return raw + b" " * (-len(raw) % 8)  # the format pads the header to 8-byte alignment with spaces


def save_bf16(path: str | Path, shapes: dict[str, tuple[int, ...]], make: Callable[[str], np.ndarray]) -> None:
    """Write ``shapes`` (name -> shape, in file order) with ``make(name)`` giving each float32 tensor."""
    header = _header(shapes)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(header)))
        out.write(header)
        for name, shape in shapes.items():
            tensor = make(name)
            if tensor.shape != tuple(shape):
                raise ValueError(f"{name}: made shape {tensor.shape}, declared {tuple(shape)}")
            out.write(to_bfloat16_bits(tensor).tobytes())
