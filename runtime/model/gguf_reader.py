"""A GGUF file's metadata and tensor table, read without decoding its vocabulary (no torch).

``gguf.GGUFReader`` decodes every metadata array element into its own numpy view: on a 152k-token
vocabulary that is ~20 s and ~700 MB. The model needs only the scalars and the tensor table, so
``GGUFFile`` walks the same format (the ``gguf`` package's value types and block sizes) and records
string arrays by their length only. Tensor data are numpy views on one read-only memory map of
the file; ``close()`` (or the ``with`` block's end) drops the map once the loader has copied them,
and ``file_pages.release_pages`` drops a copied tensor's pages before that, so loading never holds
the file and its copy whole at once.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType

GGUF_MAGIC = b"GGUF"
_SCALARS = {GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
            GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
            GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
            GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d"}


@dataclass(frozen=True)
class StringArray:
    """A metadata array of strings, not decoded: only its length."""

    length: int


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of the file: ``shape`` in torch order (``[out, in]``), ``qtype`` its block type,
    ``data`` its raw bytes as uint8 ``[rows, row_bytes]`` (rows = all but the last dim)."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType
    data: np.ndarray

    @property
    def type_name(self) -> str:
        """The type's GGUF name, e.g. ``"Q4_K"``."""
        return self.qtype.name


class GGUFFile:
    """``metadata`` (key -> scalar, string, numeric numpy array or ``StringArray``) and ``tensors``
    (name -> ``GGUFTensor``) of a GGUF file; ``ValueError`` for a file that is not GGUF v2/v3."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._map: np.ndarray | None = np.memmap(self.path, dtype=np.uint8, mode="r")
        buf = self._map
        if len(buf) < 24 or bytes(buf[:4]) != GGUF_MAGIC:
            raise ValueError(f"{self.path} is not a GGUF file (no GGUF magic bytes)")
        version, tensor_count, kv_count = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise ValueError(f"{self.path}: GGUF version {version} is not supported (2 or 3)")
        self._pos = 24
        self.metadata: dict[str, Any] = {}
        for _ in range(kv_count):
            key = self._string()
            self.metadata[key] = self._value(GGUFValueType(self._unpack("<I")))
        table = [self._tensor_entry() for _ in range(tensor_count)]
        alignment = int(self.metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT))
        start = -(-self._pos // alignment) * alignment
        self.tensors: dict[str, GGUFTensor] = {}
        for name, shape, qtype, offset in table:
            if name in self.tensors:
                raise ValueError(f"{self.path}: tensor {name!r} appears twice")
            self.tensors[name] = self._tensor(name, shape, qtype, start + offset)

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop this object's reference to the memory map (tensor views still held keep it open)."""
        self._map = None
        self.tensors = {}

    def _unpack(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self._map, self._pos)
        self._pos += struct.calcsize(fmt)
        return value

    def _string(self) -> str:
        length = self._unpack("<Q")
        text = bytes(self._map[self._pos:self._pos + length]).decode("utf-8", errors="replace")
        self._pos += length
        return text

    def _value(self, kind: GGUFValueType) -> Any:
        if kind == GGUFValueType.STRING:
            return self._string()
        if kind == GGUFValueType.FLOAT32:  # the shortest decimal of the float32: 1e-05, not 9.99999974e-06
            return float(str(np.float32(self._unpack("<f"))))
        if kind != GGUFValueType.ARRAY:
            return self._unpack(_SCALARS[kind])
        item_kind, count = GGUFValueType(self._unpack("<I")), self._unpack("<Q")
        if item_kind == GGUFValueType.STRING:
            for _ in range(count):  # skipped, not decoded
                self._pos += 8 + struct.unpack_from("<Q", self._map, self._pos)[0]
            return StringArray(count)
        if item_kind == GGUFValueType.ARRAY:
            return [self._value(GGUFValueType.ARRAY) for _ in range(count)]
        dtype = np.dtype(_SCALARS[item_kind])
        values = np.frombuffer(self._map, dtype=dtype, count=count, offset=self._pos).copy()
        self._pos += dtype.itemsize * count
        return values

    def _tensor_entry(self) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int]:
        name = self._string()
        dims = [self._unpack("<Q") for _ in range(self._unpack("<I"))]
        qtype = self._unpack("<I")
        try:
            qtype = GGMLQuantizationType(qtype)
        except ValueError:
            raise ValueError(f"{self.path}: tensor {name!r} has unknown GGML type {qtype}") from None
        return name, tuple(reversed(dims)), qtype, self._unpack("<Q")

    def _tensor(self, name: str, shape: tuple[int, ...], qtype: GGMLQuantizationType, offset: int) -> GGUFTensor:
        block, type_size = GGML_QUANT_SIZES[qtype]
        if shape[-1] % block:
            raise ValueError(f"{self.path}: tensor {name!r} row of {shape[-1]} is not whole {qtype.name} blocks")
        rows = int(np.prod(shape[:-1], dtype=np.int64))
        row_bytes = shape[-1] // block * type_size
        if offset + rows * row_bytes > len(self._map):
            raise ValueError(f"{self.path}: tensor {name!r} runs past the end of the file (truncated?)")
        data = self._map[offset:offset + rows * row_bytes].reshape(rows, row_bytes)
        return GGUFTensor(name, shape, qtype, data)
