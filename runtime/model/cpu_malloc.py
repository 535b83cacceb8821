"""glibc malloc tuning for the CPU engine: keep freed memory in the process instead of the OS (and
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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

DISABLE_ENV = "RADIXLM_DISABLE_MALLOC_TUNING"
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
        _tuned = _apply()
    return _tuned


def _apply() -> bool:
    if not sys.platform.startswith("linux") or os.environ.get(DISABLE_ENV, "") not in ("", "0"):
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
    if not sys.platform.startswith("linux") or os.environ.get(DISABLE_ENV, "") not in ("", "0"):
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
