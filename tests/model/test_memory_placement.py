"""``runtime/model/memory_placement.py``: glibc malloc tuning (applied once on Linux, and the opt-out
variable really opts out); weights on transparent huge pages: same values, new storage
advised for huge pages, small and tied tensors handled, and the opt-out.

``memory_placement.release_pages``: a copied tensor's pages of the file map leave the resident set,
and reading them again gives the same bytes (the GGUF and safetensors loaders call it after each
copy).
"""

from __future__ import annotations

import mmap
import subprocess
import sys

import numpy as np
import pytest
import torch
from radixlm.runtime.model import memory_placement
from radixlm.runtime.model.memory_placement import release_pages


def test_opt_out_changes_nothing(monkeypatch):
    monkeypatch.setenv(memory_placement.MALLOC_TUNING_DISABLE_ENV, "1")
    assert memory_placement._apply_malloc_tuning() is False


def test_tuning_applies_on_glibc_and_is_done_once():
    # CI and development machines are Linux/glibc, where tuning must succeed
    code = ("from radixlm.runtime.model import memory_placement as m\n"
            "first = m.tune_malloc()\n"
            "m._apply_malloc_tuning = lambda: (_ for _ in ()).throw(AssertionError('applied twice'))\n"
            "print(first, m.tune_malloc())\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != memory_placement.MALLOC_TUNING_DISABLE_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


# In a fresh process, tuned: a thread fills 40 MB of its arena, frees it (the blocks end in the
# arena's top), then reports its RSS drop from malloc_trim alone and from release_free_memory.
_THREAD_ARENA = """
import ctypes, os, threading
from radixlm.runtime.model import memory_placement as m
assert m.tune_malloc()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
out = []
def work():
    blocks = [libc.malloc(1 << 20) for _ in range(40)]
    for b in blocks:
        ctypes.memset(b, 1, 1 << 20)
    for b in reversed(blocks):
        libc.free(b)
    before = rss_mb()
    libc.malloc_trim(0)
    trimmed = rss_mb()
    assert m.release_free_memory()
    out.append((before - trimmed, trimmed - rss_mb()))
t = threading.Thread(target=work)
t.start()
t.join()
print(*out[0])
"""


def test_release_hands_back_a_thread_arenas_top():
    env = {k: v for k, v in __import__("os").environ.items() if k != memory_placement.MALLOC_TUNING_DISABLE_ENV}
    out = subprocess.run([sys.executable, "-c", _THREAD_ARENA], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    by_trim, by_release = (float(x) for x in out.stdout.split())
    assert by_trim < 10  # glibc's malloc_trim leaves a thread arena's top resident
    assert by_release > 30  # release_free_memory shrinks it


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


MB = 1 << 20


def _resident_mb(path) -> float:
    """This process's resident pages of the file at ``path`` (its mappings' Rss in smaps), in MB."""
    kb, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                inside = len(head) > 5 and head[5] == str(path)
            elif inside and head[0] == "Rss:":
                kb += int(head[1])
    return kb / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise on Linux only")
def test_released_pages_leave_the_resident_set_and_read_back_the_same(tmp_path):
    path = tmp_path / "blob.bin"
    want = np.random.default_rng(0).integers(0, 256, 32 * MB, dtype=np.uint8)
    want.tofile(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    view = mapped[12345:12345 + 24 * MB]  # not page-aligned: the partial pages at its ends stay
    total = int(view.sum(dtype=np.int64))  # every page of the view resident
    assert _resident_mb(path) >= 24
    release_pages(view)
    assert _resident_mb(path) <= 0.01  # the view's two partial end pages at most
    assert int(view.sum(dtype=np.int64)) == total and np.array_equal(view, want[12345:12345 + 24 * MB])
    release_pages(view[:0])  # nothing to release


def test_loading_a_gguf_releases_the_map_it_copied(tmp_path, monkeypatch):
    from radixlm.runtime.model import gguf_loader

    released: list[int] = []
    monkeypatch.setattr(gguf_loader, "release_pages", lambda data: released.append(data.nbytes))
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "tiny.gguf"
    _write_tiny_llama(gguf, path)
    with gguf_loader.GGUFFile(path) as reader:
        total = sum(t.data.nbytes for t in reader.tensors.values())
    gguf_loader.load_gguf_model(path)
    assert sum(released) == total  # every tensor's bytes, once


def _write_tiny_llama(gguf, path) -> None:
    """A 1-layer llama GGUF with float32 and Q8_0 tensors (no tokenizer: the loader reads none)."""
    hidden, inter, heads, vocab = 64, 128, 4, 96
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(vocab)
    rng = np.random.default_rng(0)

    def q8(shape):
        return gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)

    w.add_tensor("token_embd.weight", q8((vocab, hidden)), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("output.weight", q8((vocab, hidden)), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    for name, shape in [("attn_q", (hidden, hidden)), ("attn_k", (hidden, hidden)), ("attn_v", (hidden, hidden)),
                        ("attn_output", (hidden, hidden)), ("ffn_gate", (inter, hidden)),
                        ("ffn_up", (inter, hidden)), ("ffn_down", (hidden, inter))]:
        w.add_tensor(f"blk.0.{name}.weight", q8(shape), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    for name in ("attn_norm", "ffn_norm"):
        w.add_tensor(f"blk.0.{name}.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
