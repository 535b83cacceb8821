"""``memory_placement.release_pages``: a copied tensor's pages of the file map leave the resident set,
and reading them again gives the same bytes (the GGUF and safetensors loaders call it after each
copy)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from radixlm.runtime.model.memory_placement import release_pages

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
