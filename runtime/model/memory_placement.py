"""Where the CPU engine's memory lives: the malloc heap, the weights' pages, the file maps' pages.

1. ``tune_malloc`` / ``release_free_memory``: glibc malloc tuning for the CPU engine: keep freed memory in the process instead of the OS (and
release what loading left behind once, with ``release_free_memory``).

Why: every forward allocates the same large temporaries again (gathered K/V, attention scores,
MLP activations: megabytes each). glibc serves blocks above ``M_MMAP_THRESHOLD`` with a fresh
``mmap`` and hands freed memory at the top of the heap back to the OS above ``M_TRIM_THRESHOLD``,
so each of those allocations page-faults its memory in again, zero-filled, every layer of every
step: decode attention at batch 64 over a long prefix runs several times slower with the defaults
than with both thresholds raised. Raising them lets the heap reuse the
pages it already has.

Trade-off: the process's resident memory stays at its peak (freed blocks are kept for reuse, not
returned to the OS). That is what a serving engine wants (its working set recurs every step) but
not what a short-lived tool sharing the machine might want: set ``RADIXLM_DISABLE_MALLOC_TUNING=1``
to opt out. Only glibc on Linux is touched; elsewhere (macOS, Windows, musl) this is a no-op.

2. ``move_weights_to_huge_pages``: model weights on transparent huge pages (CPU, Linux): fewer TLB misses while they stream.

Why: a decode step reads every weight once, row after row. With 4 KB pages each new page of a
weight row is a TLB miss and a page walk; with 2 MB pages one entry covers 512 times as much.
Batch-1 decode, bound by streaming the weights, gains most; batch 64, bound by the FMAs, little.

Linux serves huge pages to anonymous memory that asks for them (``madvise(MADV_HUGEPAGE)``) when
``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or ``madvise`` (the common default),
and only to pages not touched yet. So each large weight is copied once, at load time, into a fresh
anonymous mapping advised before its first write (torch's allocator does this only when
``THP_MEM_ALLOC_ENABLE=1`` is set before torch starts). The memory cost is nil after loading: the
old storage is freed as the new one takes its place, one tensor at a time, and handed back to the
OS every ``RELEASE_EVERY_BYTES`` (the engine's malloc tuning would keep it resident), so the move
adds at most that much to the load's peak.
``RADIXLM_DISABLE_HUGE_PAGES=1`` opts out; elsewhere (no THP, not Linux, CUDA tensors) this is a no-op.

3. ``release_pages``: resident pages of a read-only file map, released once their bytes were copied.

A loader that reads weights through a memory map of the file (``gguf_reader.GGUFFile``,
``model_loader.SafetensorsFile``) touches every page of it, and those pages count in the
process's resident set until the map is dropped: loading would hold the file and its copy at once.
``release_pages`` takes a copied tensor's pages out of the resident set right after the copy.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys

import numpy as np
import torch

MALLOC_TUNING_DISABLE_ENV = "RADIXLM_DISABLE_MALLOC_TUNING"
M_TRIM_THRESHOLD = -1  # mallopt parameter numbers from glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 2**31 - 1  # the largest value mallopt takes (an int)
MMAP_FALLBACK_BYTES = 32 * 2**20  # glibc's own mmap-threshold ceiling on 64-bit, for glibcs that refuse more
TRIM_PROBE_BYTES = 128 * 2**10  # >= glibc's 64 KiB consolidation threshold, below its mmap threshold

_tuned: bool | None = None  # the result of the first call: tuning is process-wide and done once


def tune_malloc() -> bool:
    """Raise glibc's trim and mmap thresholds once per process; return whether they were set.

    Returns False (and changes nothing) when not on Linux, when ``RADIXLM_DISABLE_MALLOC_TUNING``
    is set to a non-empty value other than ``0``, when the C library has no ``mallopt`` (not
    glibc), or when ``mallopt`` rejects a value. Safe to call many times.
    """
    global _tuned
    if _tuned is None:
        _tuned = _apply_malloc_tuning()
    return _tuned


def _apply_malloc_tuning() -> bool:
    if not sys.platform.startswith("linux") or os.environ.get(MALLOC_TUNING_DISABLE_ENV, "") not in ("", "0"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # no libc to load, or a libc without mallopt (musl)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success, 0 on error; setting M_MMAP_THRESHOLD also stops its dynamic growth
    trimmed = mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES) == 1
    mapped = mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES) == 1 or mallopt(M_MMAP_THRESHOLD, MMAP_FALLBACK_BYTES) == 1
    return trimmed and mapped


def release_free_memory() -> bool:
    """Hand the free pages of the heap and of the calling thread's arena back to the OS once
    (glibc's ``malloc_trim(0)``, then ``_trim_thread_arena``); return whether it ran.

    Loading leaves large freed blocks behind (the float weights that quantization replaced, the
    storage that the huge-page copies replaced); with the raised trim threshold they would stay
    resident for the life of the process. ``malloc_trim`` releases every whole free page, not only
    the heap's top, so this is called once after loading, and by the engine's loop thread once
    per idle period. A no-op where ``tune_malloc`` is (not glibc, not Linux, opted out).
    """
    if not sys.platform.startswith("linux") or os.environ.get(MALLOC_TUNING_DISABLE_ENV, "") not in ("", "0"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim, mallopt, malloc, free = libc.malloc_trim, libc.mallopt, libc.malloc, libc.free
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    if _tuned:  # untuned, glibc trims every arena's top itself
        _trim_thread_arena(mallopt, malloc, free)
    return True


def _trim_thread_arena(mallopt, malloc, free) -> None:  # noqa: ANN001 - ctypes functions
    """Shrink the top of the calling thread's arena (a thread other than the main one allocates
    from its own arena). ``malloc_trim`` frees whole pages inside every arena but the top only
    of the main heap, and a thread's top is where its step temporaries end when freed (tens of
    MB after a long prefill). glibc trims a thread arena's top whenever a block of 64 KiB or
    more is freed there and the top exceeds the trim threshold: lower the threshold for one
    such free, then restore it."""
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    malloc.argtypes = [ctypes.c_size_t]
    malloc.restype = ctypes.c_void_p
    free.argtypes = [ctypes.c_void_p]
    if mallopt(M_TRIM_THRESHOLD, TRIM_PROBE_BYTES) != 1:
        return
    try:
        block = malloc(TRIM_PROBE_BYTES)
        if block:
            free(block)
    finally:
        mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES)


HUGE_PAGES_DISABLE_ENV = "RADIXLM_DISABLE_HUGE_PAGES"
THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"
HUGE_PAGE_BYTES = 2 * 2**20  # smaller tensors cannot fill a huge page: they stay where they are
RELEASE_EVERY_BYTES = 64 * 2**20


def huge_pages_available() -> bool:
    """Whether weights can be placed on transparent huge pages here."""
    if not sys.platform.startswith("linux") or os.environ.get(HUGE_PAGES_DISABLE_ENV, "") not in ("", "0"):
        return False
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        with open(THP_SETTING, encoding="ascii") as handle:
            setting = handle.read()
    except OSError:
        return False
    return "[always]" in setting or "[madvise]" in setting


def huge_page_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of a CPU ``tensor`` in a fresh anonymous mapping advised for huge pages
    (the mapping lives as long as the returned tensor)."""
    nbytes = tensor.numel() * tensor.element_size()
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_HUGEPAGE)  # before the first write: the faults then take 2 MB pages
    out = torch.frombuffer(region, dtype=tensor.dtype, count=tensor.numel()).view(tensor.shape)
    out.copy_(tensor)
    return out


def move_weights_to_huge_pages(module: torch.nn.Module) -> int:
    """Move every large CPU parameter and buffer of ``module`` onto huge pages, in place (before
    any kernel caches a weight's address); return the bytes moved (0 when ``huge_pages_available()`` is False)."""
    if not huge_pages_available():
        return 0
    moved = pending = 0
    seen: set[int] = set()
    for owner in module.modules():
        for table in (owner._parameters, owner._buffers):
            for tensor in table.values():
                if (tensor is None or tensor.device.type != "cpu" or not tensor.is_contiguous()
                        or tensor.numel() * tensor.element_size() < HUGE_PAGE_BYTES):
                    continue
                key = tensor.untyped_storage().data_ptr()
                if key in seen:  # a tied weight (e.g. the LM head and the embedding): already moved
                    continue
                seen.add(key)
                with torch.no_grad():
                    copy = huge_page_copy(tensor.detach())
                    tensor.data = copy  # every module sharing this parameter sees the new storage
                seen.add(copy.untyped_storage().data_ptr())  # met again through a module that shares it
                moved += copy.numel() * copy.element_size()
                pending += copy.numel() * copy.element_size()
                if pending >= RELEASE_EVERY_BYTES:
                    release_free_memory()
                    pending = 0
    return moved


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
