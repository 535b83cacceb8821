"""Model weights on transparent huge pages (CPU, Linux): fewer TLB misses while they stream.

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
"""

from __future__ import annotations

import mmap
import os
import sys

import torch
from radixlm.runtime.model.cpu_malloc import release_free_memory

DISABLE_ENV = "RADIXLM_DISABLE_HUGE_PAGES"
THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"
HUGE_PAGE_BYTES = 2 * 2**20  # smaller tensors cannot fill a huge page: they stay where they are
RELEASE_EVERY_BYTES = 64 * 2**20


def available() -> bool:
    """Whether weights can be placed on transparent huge pages here."""
    if not sys.platform.startswith("linux") or os.environ.get(DISABLE_ENV, "") not in ("", "0"):
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
    any kernel caches a weight's address); return the bytes moved (0 when ``available()`` is False)."""
    if not available():
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
