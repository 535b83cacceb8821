"""Split GGUF files (``NAME-00001-of-00003.gguf``, as ``llama-gguf-split`` writes them) merged into one.

Each part is a whole GGUF file: its own header, metadata and tensor table, then its tensors' data.
The first part holds the model's metadata; every part holds ``split.no``/``split.count``/
``split.tensors.count``. :func:`merge_split_gguf` writes one file as ``llama-gguf-split --merge``
does: the first part's metadata less the ``split.*`` keys, every part's tensor table in order with
offsets moved past the parts before it, then each part's data section, aligned. Only headers are
parsed (no vocabulary decoded); data are copied in blocks, with a progress bar on a terminal.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

logger = logging.getLogger("radixlm.loading")
SPLIT_NAME = re.compile(r"^(?P<base>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type -> bytes
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_COPY_BLOCK = 1 << 22


class SplitGGUFError(ValueError):
    """The parts do not form one split GGUF model (missing parts, not GGUF, mismatched layout)."""


@dataclass(frozen=True)
class _Part:
    """One part's header read off the file: raw metadata entries and tensor entries, where data start."""

    path: Path
    version: int
    kvs: list[tuple[str, bytes]]  # key -> the entry's raw bytes (key, type, value)
    tensors: list[tuple[bytes, int]]  # the entry's bytes up to its offset field, the offset
    alignment: int
    data_start: int
    size: int


def split_parts(name: str) -> tuple[str, int, int] | None:
    """``(base, number, count)`` when ``name`` (a file name or path) is a part of a split GGUF, else None."""
    m = SPLIT_NAME.match(name.rsplit("/", 1)[-1])
    return (m["base"], int(m["no"]), int(m["count"])) if m else None


def part_names(first: str) -> list[str]:
    """The names of every part of the split GGUF whose part (any of them) is ``first``, in order."""
    found = split_parts(first)
    if found is None:
        raise SplitGGUFError(f"{first}: not a part of a split GGUF file (NAME-00001-of-0000N.gguf)")
    folder = first.rsplit("/", 1)[0] + "/" if "/" in first else ""
    base, _, count = found
    return [f"{folder}{base}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


class _Reader:
    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SplitGGUFError(f"{self.path.name}: the header runs past the end of the file")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def string(self) -> bytes:
        return self.take(self.u64())

    def skip_value(self, kind: int, depth: int = 0) -> None:
        if kind in _FIXED:
            self.take(_FIXED[kind])
        elif kind == _STRING:
            self.string()
        elif kind == _ARRAY and depth < 8:
            inner, count = self.u32(), self.u64()
            if inner in _FIXED:
                self.take(_FIXED[inner] * count)
            else:
                for _ in range(count):
                    self.skip_value(inner, depth + 1)
        else:
            raise SplitGGUFError(f"{self.path.name}: unknown metadata value type {kind}")


def _read_part(path: Path) -> _Part:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(min(size, 64 << 20))  # headers hold metadata and the tensor table only
    r = _Reader(head, path)
    if r.take(4) != _MAGIC:
        raise SplitGGUFError(f"{path.name}: not a GGUF file (no GGUF magic)")
    version = r.u32()
    if version not in (2, 3):
        raise SplitGGUFError(f"{path.name}: GGUF version {version} (2 and 3 are read)")
    n_tensors, n_kv = r.u64(), r.u64()
    kvs, alignment = [], _DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        start = r.pos
        key = r.string().decode("utf-8", "replace")
        kind = r.u32()
        if key == "general.alignment" and kind == _UINT32:
            alignment = struct.unpack("<I", head[r.pos:r.pos + 4])[0]
        r.skip_value(kind)
        kvs.append((key, head[start:r.pos]))
    tensors = []
    for _ in range(n_tensors):
        start = r.pos
        r.string()
        r.take(8 * r.u32())
        r.u32()
        entry = head[start:r.pos]
        tensors.append((entry, r.u64()))
    data_start = -(-r.pos // alignment) * alignment
    return _Part(path, version, kvs, tensors, alignment, data_start, size)


def merge_split_gguf(parts: list[Path], out: Path) -> Path:
    """Write the split GGUF ``parts`` (in order) as the one file ``out`` (atomically) and return it.

    Raises ``SplitGGUFError`` when a part is not GGUF, the parts disagree on the alignment, or
    their ``split.count`` differs from the number of parts."""
    read = [_read_part(p) for p in parts]
    first = read[0]
    count = _split_count(first)
    if count is not None and count != len(parts):
        raise SplitGGUFError(f"{first.path.name}: split.count is {count}, {len(parts)} parts were given")
    if any(p.alignment != first.alignment for p in read):
        raise SplitGGUFError(f"{first.path.name}: the parts disagree on general.alignment")
    align = first.alignment
    kvs = [raw for key, raw in first.kvs if not key.startswith("split.")]
    header = [_MAGIC, struct.pack("<IQQ", 3, sum(len(p.tensors) for p in read), len(kvs)), *kvs]
    base = 0
    for p in read:
        header += [entry + struct.pack("<Q", base + offset) for entry, offset in p.tensors]
        base += -(-(p.size - p.data_start) // align) * align
    head = b"".join(header)
    head += b"\0" * (-len(head) % align)
    tmp = out.with_name(out.name + f".{os.getpid()}.part")
    out.parent.mkdir(parents=True, exist_ok=True)
    desc = f"merging the {len(parts)} parts of {out.name} (once)"
    logger.info("%s: %.1f MB", desc, base / 1e6)
    with tmp.open("wb") as dst, tqdm(total=base, unit="B", unit_scale=True, desc=desc, leave=False,
                                     disable=None) as bar:  # None: drawn on a terminal only
        dst.write(head)
        for p in read:
            with p.path.open("rb") as src:
                src.seek(p.data_start)
                while block := src.read(_COPY_BLOCK):
                    dst.write(block)
                    bar.update(len(block))
            dst.write(b"\0" * (-(p.size - p.data_start) % align))
    tmp.replace(out)
    return out


def _split_count(part: _Part) -> int | None:
    for key, raw in part.kvs:
        if key == "split.count":
            kind = struct.unpack_from("<I", raw, 8 + len(key))[0]
            fmt = {2: "<H", 4: "<I", 10: "<Q", 3: "<h", 5: "<i"}.get(kind)
            return struct.unpack_from(fmt, raw, 12 + len(key))[0] if fmt else None
    return None
