"""Slot allocators, the KV pool, the req_to_token table, and BatchSpec -> ForwardBatch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable, kv_cache_dtype
from radixlm.runtime.scheduler.batch import BatchSpec
from radixlm.runtime.scheduler.req_cache import ReqSlotAllocator, SlotAllocator
from radixlm.runtime.server_args import ServerArgs

pytestmark = pytest.mark.unit  # pure Python: no engine, no server, no model forward

# --- SlotAllocator / ReqSlotAllocator ------------------------------------------------------------


def test_slot_zero_is_reserved():
    alloc = SlotAllocator(8)
    assert (alloc.num_free, alloc.num_used) == (7, 0)
    slots = alloc.alloc(7)
    assert sorted(slots) == list(range(1, 8))
    assert (alloc.num_free, alloc.num_used) == (0, 7)
    with pytest.raises(ValueError, match="slot 0 is reserved or out of range"):
        alloc.free([0])


def test_alloc_returns_none_when_short_and_takes_nothing():
    alloc = SlotAllocator(5)
    first = alloc.alloc(3)
    assert alloc.alloc(2) is None
    assert alloc.num_free == 1
    assert alloc.alloc(0) == []
    alloc.free(first)
    assert len(set(alloc.alloc(4))) == 4
    with pytest.raises(ValueError, match="n must be >= 0"):
        alloc.alloc(-1)


def test_free_arbitrary_lists_and_reuse():
    alloc = SlotAllocator(10)
    slots = alloc.alloc(9)
    alloc.free(slots[2:7:2])
    again = alloc.alloc(3)
    assert sorted(again) == sorted(slots[2:7:2])
    assert alloc.num_used == 9


@pytest.mark.parametrize("bad, message", [
    ([1, 3, 3], "slot 3 is not in use"),  # twice in one call
    ([2, 5], "slot 5 is not in use"),  # never handed out
    ([11], "slot 11 is reserved or out of range"),
    ([-1], "slot -1 is reserved or out of range"),
    ([0], "slot 0 is reserved"),
])
def test_bad_free_raises_and_changes_nothing(bad, message):
    alloc = SlotAllocator(11)
    held = alloc.alloc(4)  # slots 1..4
    before = alloc.num_free
    with pytest.raises(ValueError, match=message):
        alloc.free(bad)
    assert alloc.num_free == before and all(alloc.is_used(s) for s in held)
    alloc.free(held)
    with pytest.raises(ValueError, match="double free"):
        alloc.free([held[0]])


def test_req_slot_allocator_uses_every_row():
    rows = ReqSlotAllocator(3)
    got = rows.alloc(3)
    assert sorted(got) == [0, 1, 2] and rows.alloc(1) is None
    rows.free([1])
    with pytest.raises(ValueError, match="request row 1 is not in use"):
        rows.free([1])
    with pytest.raises(ValueError, match="out of range"):
        rows.free([3])
    assert rows.alloc(1) == [1]


def test_allocator_sizes_validated():
    with pytest.raises(ValueError, match="num_slots"):
        SlotAllocator(1)
    with pytest.raises(ValueError, match="max_reqs"):
        ReqSlotAllocator(0)


def test_scheduler_side_modules_do_not_import_torch():
    code = ("import sys; import radixlm.runtime.scheduler.req_cache; "
            "from radixlm.runtime.scheduler.batch import BatchSpec; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- KVPool / ReqToTokenTable --------------------------------------------------------------------


def test_kv_pool_shapes_and_size():
    pool = KVPool(16, 3, 2, 8, torch.float32, "cpu")
    assert len(pool.k_buffers) == len(pool.v_buffers) == 3
    assert pool.k_buffers[2].shape == (16, 2, 8) and pool.v_buffers[0].dtype == torch.float32
    assert pool.k_buffers[0].data_ptr() != pool.k_buffers[1].data_ptr()
    assert KVPool.bytes_per_slot(3, 2, 8, torch.bfloat16) == 2 * 3 * 2 * 8 * 2
    assert pool.size_bytes() == 16 * 2 * 3 * 2 * 8 * 4


def test_req_to_token_write_and_bounds():
    table = ReqToTokenTable(2, 6, "cpu")
    assert table.table.dtype == torch.int64 and table.table.shape == (2, 6)
    table.write(1, 2, [9, 4, 7])
    assert table.read(1, 6) == [0, 0, 9, 4, 7, 0]
    with pytest.raises(ValueError, match="max_context_len"):
        table.write(0, 4, [1, 2, 3])
    with pytest.raises(ValueError, match="req_pool_index 2"):
        table.write(2, 0, [1])


# --- BatchSpec / ForwardBatch --------------------------------------------------------------------


def _spec(**changes) -> BatchSpec:
    base = dict(is_decode=False, req_pool_indices=[2, 0], input_ids=[11, 12, 13, 14, 15],
                prefix_lens=[3, 0], extend_lens=[2, 3], out_cache_loc=[40, 41, 50, 51, 52],
                logits_indices=[1, 4], table_writes=[(2, 0, [30, 31, 32])])
    return BatchSpec(**{**base, **changes})


def test_from_spec_builds_tensors_and_table():
    table = ReqToTokenTable(4, 8, "cpu")
    fb = ForwardBatch.from_spec(_spec(), table, "cpu")
    assert fb.batch_size == 2 and fb.num_tokens == 5 and not fb.is_decode
    assert fb.input_ids.tolist() == [11, 12, 13, 14, 15]
    assert fb.positions.tolist() == [3, 4, 0, 1, 2]
    assert fb.out_cache_loc.tolist() == [40, 41, 50, 51, 52]
    assert fb.qo_indptr.tolist() == [0, 2, 5]
    assert fb.kv_indptr.tolist() == [0, 5, 8]
    assert fb.kv_indices.tolist() == [30, 31, 32, 40, 41, 50, 51, 52]
    assert fb.logits_indices.tolist() == [1, 4]
    assert table.read(2, 5) == [30, 31, 32, 40, 41] and table.read(0, 3) == [50, 51, 52]
    for t in (fb.input_ids, fb.positions, fb.qo_indptr, fb.kv_indices):
        assert t.dtype == torch.int64


def test_from_spec_decode_reads_previous_slots():
    table = ReqToTokenTable(4, 8, "cpu")
    ForwardBatch.from_spec(_spec(), table, "cpu")
    fb = ForwardBatch.from_spec(BatchSpec(True, [0, 2], [7, 8], [3, 5], [1, 1], [60, 61], [0, 1]), table, "cpu")
    assert fb.positions.tolist() == [3, 5]
    assert fb.kv_indices.tolist() == [50, 51, 52, 60, 30, 31, 32, 40, 41, 61]
    assert fb.kv_indptr.tolist() == [0, 4, 10]


def test_last_token_indices():
    assert BatchSpec.last_token_indices([2, 3, 1]) == [1, 4, 5]


@pytest.mark.parametrize("changes, field", [
    ({"prefix_lens": [3]}, "prefix_lens"),
    ({"extend_lens": [2, 2]}, "input_ids"),
    ({"out_cache_loc": [1, 2, 3]}, "out_cache_loc"),
    ({"extend_lens": [0, 5]}, "extend_lens"),
    ({"prefix_lens": [-1, 0]}, "prefix_lens"),
    ({"is_decode": True}, "is_decode"),
    ({"logits_indices": [5]}, "logits_indices"),
    ({"logits_indices": []}, "logits_indices"),
    ({"req_pool_indices": [], "prefix_lens": [], "extend_lens": []}, "req_pool_indices"),
    ({"prefix_lens": [7, 0]}, "max_context_len"),
])
def test_from_spec_rejects_inconsistent_specs(changes, field):
    with pytest.raises(ValueError, match=field):
        ForwardBatch.from_spec(_spec(**changes), ReqToTokenTable(4, 8, "cpu"), "cpu")


# ---- the KV cache's dtype (--kv-cache-dtype)

@pytest.mark.parametrize("name, compute, half_ok, expected", [
    ("auto", torch.float32, True, torch.float16),      # float32 compute, kernels that read float16: 16-bit
    ("auto", torch.float32, False, torch.float32),     # kernels that cannot: the compute dtype
    ("auto", torch.bfloat16, True, torch.bfloat16),    # a 16-bit compute dtype is kept
    ("auto", torch.float16, False, torch.float16),
    ("float32", torch.float32, True, torch.float32),   # a named dtype is what is named
    ("bfloat16", torch.float32, False, torch.bfloat16),
    ("float16", torch.bfloat16, True, torch.float16),
])
def test_kv_cache_dtype_resolution(name, compute, half_ok, expected):
    assert kv_cache_dtype(name, compute, half_ok) == expected


def test_kv_cache_dtype_names_and_refusals():
    assert [ServerArgs(kv_cache_dtype=v).kv_cache_dtype for v in ("fp16", "half", "bf16", "fp32", "float")] == [
        "float16", "float16", "bfloat16", "float32", "float32"]
    for fp8 in ("fp8", "fp8_e5m2", "fp8_e4m3"):
        with pytest.raises(ValueError, match=f"kv_cache_dtype {fp8}: an FP8 KV cache has no meaning here"):
            ServerArgs(kv_cache_dtype=fp8)
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of"):
        ServerArgs(kv_cache_dtype="int4")
    with pytest.raises(ValueError, match="kv_cache_dtype must be auto or one of"):
        kv_cache_dtype("fp16", torch.float32, True)  # ServerArgs spells it first


def test_a_16_bit_pool_holds_twice_the_tokens_in_the_same_bytes():
    per_slot = {dt: KVPool.bytes_per_slot(24, 2, 64, dt) for dt in (torch.float32, torch.float16, torch.bfloat16)}
    assert per_slot[torch.float32] == 2 * per_slot[torch.float16] == 2 * per_slot[torch.bfloat16] == 24 * 2 * 64 * 8
    pool = KVPool(10, 2, 2, 8, torch.float16, "cpu")
    assert pool.k_buffers[0].dtype == torch.float16 and pool.size_bytes() == 10 * 2 * 2 * 2 * 8 * 2


def test_engine_kv_dtype_default_and_capacity(tiny_llama, monkeypatch):
    """``auto`` is float16 where the native CPU kernels run (float32 otherwise), the start-up line names it,
    and sizing by memory counts bytes: the 16-bit pool gets twice the float32 pool's slots (free memory
    pinned at 4 GiB, so that other processes cannot move it between the two engines)."""
    import os

    from radixlm.kernels import cpu_native

    from radixlm import Engine

    real = os.sysconf
    pinned = {"SC_AVPHYS_PAGES": (4 << 30) // 4096, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(os, "sysconf", lambda name: pinned.get(name) or real(name))
    slots = {}
    for name in ("auto", "float32"):
        with Engine(tiny_llama, kv_cache_dtype=name, mem_fraction=0.001, log_level="warning") as engine:
            runner = engine.runner
            slots[name] = runner.num_slots
            expected = torch.float16 if name == "auto" and cpu_native.available() else torch.float32
            assert runner.kv_pool.dtype == runner.kv_dtype == expected
            assert f"tokens ({str(expected).removeprefix('torch.')})" in engine.summary().line()
    if cpu_native.available():  # both below the CPU cap: memory decides
        assert slots["auto"] - 2 * slots["float32"] in (0, 1) and slots["auto"] < 32768, slots  # floors
