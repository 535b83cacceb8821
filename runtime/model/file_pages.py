"""Resident pages of a read-only file map, released once their bytes were copied.

A loader that reads weights through a memory map of the file (``gguf_reader.GGUFFile``,
``safetensors_reader.SafetensorsFile``) touches every page of it, and those pages count in the
process's resident set until the map is dropped: loading would hold the file and its copy at once.
``release_pages`` takes a copied tensor's pages out of the resident set right after the copy.
"""

from __future__ import annotations

import ctypes
import mmap
import sys

import numpy as np

MADV_DONTNEED = 4  # Linux's <sys/mman.h>


def release_pages(data: np.ndarray) -> None:
    """Unmap this process's pages wholly inside ``data`` (a view of a read-only file map) from its
    resident set: a later read faults them in again from the page cache, with the same bytes, so
    only resident memory changes. A no-op outside Linux."""
    if not sys.platform.startswith("linux") or data.nbytes == 0:
        return
    start = data.__array_interface__["data"][0]
    lo = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    hi = (start + data.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if hi > lo:
        _madvise(lo, hi - lo)


def _madvise(address: int, length: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), MADV_DONTNEED)
