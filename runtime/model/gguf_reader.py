"""A GGUF file's metadata and tensor table, read without decoding its vocabulary (no torch).

``gguf.GGUFReader`` decodes every metadata array element into its own numpy view: on a 152k-token
vocabulary that is ~20 s and ~700 MB. The model needs only the scalars and the tensor table, so
``GGUFFile`` walks the same format (the ``gguf`` package's value types and block sizes) and records
string arrays by their length only. Tensor data are numpy views on one read-only memory map of
the file; ``close()`` (or the ``with`` block's end) drops the map once the loader has copied them,
and ``memory_placement.release_pages`` drops a copied tensor's pages before that, so loading never holds
the file and its copy whole at once.

Nothing in the file is trusted (as llama.cpp's ``gguf_init_from_file``): the magic and version are
read first (``gguf_path.check_gguf_header``); every length and count is checked against the bytes
that remain before anything is allocated or decoded, so rejecting a file costs at most about its
header; sizes are Python integers (no int64 wrap-around); nested arrays are walked without recursion
to at most ``MAX_ARRAY_DEPTH`` levels; tensor data must be aligned, inside the file and
non-overlapping. Every failure is one ``ValueError`` ``"<file>: <field>: <problem>"``.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType
from radixlm.runtime.gguf_path import HEADER_BYTES, check_gguf_header

MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 8  # arrays of arrays: llama.cpp reads none; deeper files are refused
MAX_NESTED_ITEMS = 1 << 16  # elements of nested arrays in all (each costs a Python object)
MAX_NAME_BYTES = 1024  # a key or tensor name (llama.cpp's tensor names: 64)
MAX_ELEMENTS = (1 << 63) - 1  # a tensor's element count must fit ggml's int64
_SCALARS = {GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
            GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
            GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
            GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d"}
_MIN_VALUE_BYTES = {GGUFValueType.STRING: 8, GGUFValueType.ARRAY: 12,
                    **{kind: struct.calcsize(fmt) for kind, fmt in _SCALARS.items()}}


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


class _Cursor:
    """A read position in ``buf`` that checks every read against the bytes that remain."""

    def __init__(self, path: str, buf: np.ndarray, pos: int) -> None:
        self.path, self.buf, self.pos, self.end = path, buf, pos, len(buf)

    def fail(self, field: str, problem: str) -> ValueError:
        return ValueError(f"{self.path}: {field}: {problem}")

    def need(self, size: int, field: str) -> None:
        if size > self.end - self.pos:
            raise self.fail(field, f"needs {size} bytes at offset {self.pos}, only {self.end - self.pos} "
                            "remain (corrupt or truncated)")

    def unpack(self, fmt: str, field: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size, field)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def count(self, field: str, item_bytes: int) -> int:
        """A u64 count of items of at least ``item_bytes`` bytes each, checked against the rest."""
        n = self.unpack("<Q", field)
        if n * item_bytes > self.end - self.pos:
            raise self.fail(field, f"{n} items cannot fit the {self.end - self.pos} bytes that remain")
        return n

    def view(self, field: str) -> np.ndarray:
        """A length-prefixed string's bytes as a view on the map (nothing copied)."""
        length = self.unpack("<Q", field)
        self.need(length, field)
        data = self.buf[self.pos:self.pos + length]
        self.pos += length
        return data

    def key(self, field: str) -> str:
        data = self.view(field)
        if len(data) > MAX_NAME_BYTES:
            raise self.fail(field, f"a name of {len(data)} bytes (at most {MAX_NAME_BYTES})")
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(field, f"not valid UTF-8 (byte {e.start})") from None

    def value_type(self, field: str) -> GGUFValueType:
        code = self.unpack("<I", field)
        try:
            return GGUFValueType(code)
        except ValueError:
            raise self.fail(field, f"unknown value type {code}") from None


class GGUFFile:
    """``metadata`` (key -> scalar, string, numeric numpy array, ``StringArray`` or a list for nested
    arrays) and ``tensors`` (name -> ``GGUFTensor``) of a GGUF v2/v3 file; ``ValueError`` naming the
    file, the field and the problem for anything else (see the module docstring)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        _, tensor_count, kv_count = check_gguf_header(self.path)
        self._map: np.ndarray | None = np.memmap(self.path, dtype=np.uint8, mode="r")
        cur = _Cursor(self.path, self._map, HEADER_BYTES)
        self.metadata: dict[str, Any] = {}
        for i in range(kv_count):
            key = cur.key(f"key #{i}")
            if key in self.metadata:
                raise cur.fail(key, "the key appears twice")
            self.metadata[key] = _value(cur, cur.value_type(key), key)
        table = [_tensor_entry(cur, i) for i in range(tensor_count)]
        alignment = self._alignment(cur)
        start = -(-cur.pos // alignment) * alignment
        self.tensors: dict[str, GGUFTensor] = {}
        spans = []
        for name, shape, qtype, offset in table:
            if name in self.tensors:
                raise cur.fail(name, "the tensor appears twice")
            if offset % alignment:
                raise cur.fail(name, f"data offset {offset} is not a multiple of the alignment {alignment}")
            self.tensors[name] = tensor = self._tensor(name, shape, qtype, start + offset)
            spans.append((offset, offset + tensor.data.nbytes, name))
        _check_disjoint(cur, sorted(spans))
        # only now, with the whole header walked, are strings decoded and arrays copied out of the map
        self.metadata = {key: _own(value) for key, value in self.metadata.items()}

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop this object's reference to the memory map (tensor views still held keep it open)."""
        self._map = None
        self.tensors = {}

    def _alignment(self, cur: _Cursor) -> int:
        alignment = self.metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 \
                or alignment & (alignment - 1):
            raise cur.fail("general.alignment", f"must be a power of two, got {alignment if isinstance(alignment, int) else type(alignment).__name__}")
        return alignment

    def _tensor(self, name: str, shape: tuple[int, ...], qtype: GGMLQuantizationType, offset: int) -> GGUFTensor:
        block, type_size = GGML_QUANT_SIZES[qtype]
        if shape[-1] % block:
            raise ValueError(f"{self.path}: {name}: row of {shape[-1]} is not whole {qtype.name} blocks")
        rows = math.prod(shape[:-1])  # Python integers: no wrap-around
        row_bytes = shape[-1] // block * type_size
        if math.prod(shape) > MAX_ELEMENTS or offset + rows * row_bytes > len(self._map):
            raise ValueError(f"{self.path}: {name}: {rows * row_bytes} bytes of data at offset {offset} run past "
                             f"the end of the file ({len(self._map)} bytes; truncated?)")
        data = self._map[offset:offset + rows * row_bytes].reshape(rows, row_bytes)
        return GGUFTensor(name, shape, qtype, data)


@dataclass(frozen=True)
class _Text:
    """A string value's bytes on the map, decoded by :func:`_own` once the header is known good."""

    data: np.ndarray


def _own(value: Any) -> Any:
    """``value`` with its strings decoded and its arrays copied off the map (nested lists: no recursion)."""
    if isinstance(value, _Text):
        return bytes(value.data).decode("utf-8", errors="replace")
    if isinstance(value, np.ndarray):
        return value.copy()
    if not isinstance(value, list):
        return value
    stack = [value]
    while stack:
        items = stack.pop()
        for i, item in enumerate(items):
            if isinstance(item, list):
                stack.append(item)
            elif isinstance(item, np.ndarray):
                items[i] = item.copy()
    return value


def _value(cur: _Cursor, kind: GGUFValueType, field: str) -> Any:
    """One metadata value of type ``kind``; nested arrays through :func:`_nested_array` (no recursion)."""
    if kind == GGUFValueType.STRING:
        return _Text(cur.view(field))
    if kind == GGUFValueType.FLOAT32:  # the shortest decimal of the float32: 1e-05, not 9.99999974e-06
        return float(str(np.float32(cur.unpack("<f", field))))
    if kind != GGUFValueType.ARRAY:
        return cur.unpack(_SCALARS[kind], field)
    item_kind = cur.value_type(field)
    count = cur.count(field, _MIN_VALUE_BYTES[item_kind])
    if item_kind == GGUFValueType.ARRAY:
        return _nested_array(cur, count, field)
    return _flat_array(cur, item_kind, count, field)


def _flat_array(cur: _Cursor, item_kind: GGUFValueType, count: int, field: str) -> Any:
    """``count`` values of the scalar or string type ``item_kind`` (counts already checked)."""
    if item_kind == GGUFValueType.STRING:
        for i in range(count):  # skipped, not decoded
            length = cur.unpack("<Q", f"{field}[{i}]")
            cur.need(length, f"{field}[{i}]")
            cur.pos += length
        return StringArray(count)
    dtype = np.dtype(_SCALARS[item_kind])
    values = np.frombuffer(cur.buf, dtype=dtype, count=count, offset=cur.pos)  # a view: copied once all is read
    cur.pos += dtype.itemsize * count
    return values


def _nested_array(cur: _Cursor, count: int, field: str) -> list[Any]:
    """An array of ``count`` arrays, walked with an explicit stack at most ``MAX_ARRAY_DEPTH`` deep."""
    root: list[Any] = []
    stack = [(root, count)]  # (the list being filled, how many items it still needs)
    items = 0
    while stack:
        out, left = stack[-1]
        if left == 0:
            stack.pop()
            continue
        stack[-1] = (out, left - 1)
        items += 1
        if items > MAX_NESTED_ITEMS:
            raise cur.fail(field, f"nested arrays hold more than {MAX_NESTED_ITEMS} elements")
        item_kind = cur.value_type(field)
        n = cur.count(field, _MIN_VALUE_BYTES[item_kind])
        if item_kind == GGUFValueType.ARRAY:
            if len(stack) >= MAX_ARRAY_DEPTH:
                raise cur.fail(field, f"arrays nest deeper than {MAX_ARRAY_DEPTH} levels")
            inner: list[Any] = []
            out.append(inner)
            stack.append((inner, n))
            continue
        out.append(_flat_array(cur, item_kind, n, field))
    return root


def _tensor_entry(cur: _Cursor, index: int) -> tuple[str, tuple[int, ...], GGMLQuantizationType, int]:
    name = cur.key(f"tensor #{index} name")
    n_dims = cur.unpack("<I", f"{name}: n_dims")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cur.fail(name, f"n_dims {n_dims} is outside 1..{MAX_DIMS}")
    dims = [cur.unpack("<Q", f"{name}: dims") for _ in range(n_dims)]
    code = cur.unpack("<I", f"{name}: type")
    try:
        qtype = GGMLQuantizationType(code)
    except ValueError:
        raise cur.fail(name, f"unknown GGML type {code}") from None
    if qtype not in GGML_QUANT_SIZES:
        raise cur.fail(name, f"GGML type {qtype.name} has no block size")
    return name, tuple(reversed(dims)), qtype, cur.unpack("<Q", f"{name}: offset")


def _check_disjoint(cur: _Cursor, spans: list[tuple[int, int, str]]) -> None:
    """Tensor data ranges ``(start, end, name)``, sorted by start, must not overlap."""
    for (_, end, name), (start, _, nxt) in zip(spans, spans[1:]):
        if start < end:
            raise cur.fail(nxt, f"its data at offset {start} overlaps tensor {name!r} (which ends at {end})")
