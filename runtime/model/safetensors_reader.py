"""A safetensors file read through one memory map, tensor by tensor, its pages released as it goes.

The format is an 8-byte little-endian header length, a JSON header (name -> ``dtype``, ``shape``,
``data_offsets`` relative to the data, plus an optional ``__metadata__``) and the raw little-endian
tensor data. ``safetensors.safe_open`` maps the file too but keeps every page it touched resident
until the file is closed, so loading a checkpoint held the file and the model at once (a float32
0.5B model peaked at ~4 GB for ~2 GB of weights). Here each tensor is a numpy view of the map,
copied into its parameter, then its pages are released (``file_pages.release_pages``).
"""

from __future__ import annotations

import json
import os
import struct
import warnings

import numpy as np
import torch

# safetensors dtype -> (numpy storage type, torch dtype)
DTYPES: dict[str, tuple[type, torch.dtype]] = {
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
        if entry["dtype"] not in DTYPES:
            raise ValueError(f"{self.path}: tensor {name!r} has unsupported dtype {entry['dtype']}")
        np_type, _ = DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        if self._data + end > len(self._map):
            raise ValueError(f"{self.path}: tensor {name!r} runs past the end of the file (truncated?)")
        raw = self._map[self._data + begin:self._data + end]
        return raw.view(np_type).reshape(entry["shape"])

    def tensor(self, name: str, view: np.ndarray) -> torch.Tensor:
        """A torch tensor over ``view`` (of ``name``), in the file's dtype; not a copy (read only)."""
        _, dtype = DTYPES[self._entries[name]["dtype"]]
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
