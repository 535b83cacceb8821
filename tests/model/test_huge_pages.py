"""Weights on transparent huge pages (``runtime/model/memory_placement.py``): same values, new storage
advised for huge pages, small and tied tensors handled, and the opt-out."""

from __future__ import annotations

import mmap

import pytest
import torch
from radixlm.runtime.model import memory_placement


def _vma_flags(address: int) -> dict[str, str]:
    """The /proc/self/smaps fields of the mapping that holds ``address``."""
    fields: dict[str, str] = {}
    inside = False
    with open("/proc/self/smaps", encoding="ascii") as handle:
        for line in handle:
            head = line.split()[0]
            if "-" in head and ":" not in head:  # a mapping's first line: start-end perms ...
                start, end = (int(x, 16) for x in head.split("-"))
                if inside:
                    break
                inside = start <= address < end
            elif inside:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
    return fields


needs_thp = pytest.mark.skipif(not memory_placement.huge_pages_available(), reason="no transparent huge pages here (Linux with "
                               "THP 'always' or 'madvise', RADIXLM_DISABLE_HUGE_PAGES unset)")


@needs_thp
def test_copy_keeps_the_values_in_a_mapping_advised_for_huge_pages():
    weight = torch.randn(1024, 1024)
    copy = memory_placement.huge_page_copy(weight)
    assert torch.equal(copy, weight) and copy.data_ptr() != weight.data_ptr()
    assert _vma_flags(copy.data_ptr()).get("THPeligible") == "1"
    with open(memory_placement.THP_SETTING, encoding="ascii") as handle:
        madvise_only = "[madvise]" in handle.read()
    if madvise_only:  # then the advice is what made it eligible: the same mapping without it is not
        # (a control in its own mapping: a malloc'd block may reuse heap pages numpy advised earlier)
        region = mmap.mmap(-1, weight.numel() * 4, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        plain = torch.frombuffer(region, dtype=torch.float32, count=weight.numel())
        plain.copy_(weight.view(-1))
        assert _vma_flags(plain.data_ptr()).get("THPeligible") != "1"


@needs_thp
def test_move_takes_large_tensors_once_and_keeps_the_module_exact():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 16))
    tied = torch.nn.Linear(1024, 1024, bias=False)
    tied.weight = model[0].weight  # the same parameter in two modules (like a tied LM head)
    holder = torch.nn.ModuleList([model, tied])
    x = torch.randn(3, 1024)
    before = model(x)
    small = model[1].weight.data_ptr()
    moved = memory_placement.move_weights_to_huge_pages(holder)
    assert moved == 1024 * 1024 * 4  # the big weight once; its 4 KB bias and the small layer stay
    assert tied.weight is model[0].weight and _vma_flags(tied.weight.data_ptr()).get("THPeligible") == "1"
    assert model[1].weight.data_ptr() == small
    assert torch.equal(model(x), before)


def test_opt_out_moves_nothing(monkeypatch):
    monkeypatch.setenv(memory_placement.HUGE_PAGES_DISABLE_ENV, "1")
    layer = torch.nn.Linear(1024, 1024)
    address = layer.weight.data_ptr()
    assert not memory_placement.huge_pages_available() and memory_placement.move_weights_to_huge_pages(layer) == 0
    assert layer.weight.data_ptr() == address
