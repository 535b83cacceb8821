"""Cascade decode attention (shared-prefix split) in the torch kernels, and its detection in ForwardBatch."""

from __future__ import annotations

import pytest
import torch
from radixlm.kernels import decode_attention_ref
from radixlm.kernels.torch_ops import decode_attention_torch
from radixlm.runtime.model.forward_batch import MIN_SHARED_PREFIX_LEN, ForwardBatch
from radixlm.runtime.model.kv_pool import ReqToTokenTable
from radixlm.runtime.scheduler.batch import BatchSpec

HEAD_DIM = 16
NUM_SLOTS = 600


def _pools(kv_heads: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(kv_heads)
    k = torch.randn(NUM_SLOTS, kv_heads, HEAD_DIM, generator=g).to(dtype)
    v = torch.randn(NUM_SLOTS, kv_heads, HEAD_DIM, generator=g).to(dtype)
    return k, v


def _batch(prefix_len: int, suffix_lens: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_indptr, kv_indices: every request starts with the same ``prefix_len`` (shuffled) slots,
    then its own distinct slots."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(NUM_SLOTS - 1, generator=g) + 1  # slot 0 is padding
    prefix, rest = perm[:prefix_len], perm[prefix_len:]
    pieces, start = [], 0
    for n in suffix_lens:
        pieces.append(torch.cat([prefix, rest[start:start + n]]))
        start += n
    lens = torch.tensor([len(p) for p in pieces])
    return torch.nn.functional.pad(lens.cumsum(0), (1, 0)), torch.cat(pieces)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor,
           shared: int, atol: float = 1e-5) -> None:
    ref = decode_attention_ref(q, k, v, indptr, indices, 0.25)
    out = decode_attention_torch(q, k, v, indptr, indices, 0.25, shared_prefix_len=shared)
    assert out.dtype == q.dtype and out.shape == q.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=atol)


@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize("kv_heads", [1, 2])
def test_cascade_matches_reference_ragged_suffixes(group: int, kv_heads: int) -> None:
    k, v = _pools(kv_heads)
    suffix_lens = [1, 7, 3, 20, 1, 12]
    indptr, indices = _batch(90, suffix_lens, seed=group)
    q = torch.randn(len(suffix_lens), kv_heads * group, HEAD_DIM, generator=torch.Generator().manual_seed(1))
    for shared in (90, 45, 1, 0):  # the whole shared prefix, part of it (rest counts as suffix), none
        _check(q, k, v, indptr, indices, shared)


def test_cascade_with_empty_suffix_and_single_request() -> None:
    k, v = _pools(2)
    indptr, indices = _batch(40, [0, 5, 2], seed=3)  # request 0 is exactly the shared prefix
    q = torch.randn(3, 4, HEAD_DIM)
    _check(q, k, v, indptr, indices, 40)
    indptr1, indices1 = _batch(30, [4], seed=4)
    _check(q[:1], k, v, indptr1, indices1, 30)  # bs = 1: the "shared" prefix is its whole context
    all_prefix, idx = _batch(25, [0, 0], seed=5)  # no suffix anywhere
    _check(q[:2], k, v, all_prefix, idx, 25)


def test_batch_sharing_nothing_and_non_contiguous_pool() -> None:
    big_k, big_v = _pools(4)
    k, v = big_k[:, ::2], big_v[:, ::2]  # [slots, 2, D] with a stride gap between heads
    g = torch.Generator().manual_seed(6)
    lens = torch.tensor([9, 33, 1, 17])
    indices = torch.randperm(NUM_SLOTS - 1, generator=g)[: int(lens.sum())] + 1
    indptr = torch.nn.functional.pad(lens.cumsum(0), (1, 0))
    q = torch.randn(4, 8, HEAD_DIM, generator=g)
    _check(q, k, v, indptr, indices, 0)
    indptr2, indices2 = _batch(50, [3, 8], seed=7)
    _check(q[:2], k, v, indptr2, indices2, 50)


def test_cascade_low_precision_pool() -> None:
    k, v = _pools(2, torch.bfloat16)
    indptr, indices = _batch(64, [2, 9, 4], seed=8)
    q = torch.randn(3, 8, HEAD_DIM).to(torch.bfloat16)
    _check(q, k, v, indptr, indices, 64, atol=2e-2)


def test_shared_prefix_len_rejects_bad_values() -> None:
    k, v = _pools(1)
    indptr, indices = _batch(10, [2, 3], seed=9)
    q = torch.randn(2, 2, HEAD_DIM)
    with pytest.raises(ValueError, match="shared_prefix_len"):
        decode_attention_torch(q, k, v, indptr, indices, 0.25, shared_prefix_len=13)  # > shortest (12)
    with pytest.raises(ValueError, match="shared_prefix_len"):
        decode_attention_torch(q, k, v, indptr, indices, 0.25, shared_prefix_len=-1)
    with pytest.raises(TypeError, match="shared_prefix_len"):
        decode_attention_torch(q, k, v, indptr, indices, 0.25, shared_prefix_len=2.0)


def _decode_spec(rows: list[int], kv_lens: list[int], new_slots: list[int]) -> BatchSpec:
    return BatchSpec(is_decode=True, req_pool_indices=rows, input_ids=[5] * len(rows),
                     prefix_lens=[n - 1 for n in kv_lens], extend_lens=[1] * len(rows),
                     out_cache_loc=new_slots, logits_indices=list(range(len(rows))))


def test_from_spec_detects_the_shared_prefix() -> None:
    table = ReqToTokenTable(4, 128, "cpu")
    shared = list(range(1, 41))  # 40 slots every request holds
    table.write(0, 0, shared + [100, 101])
    table.write(1, 0, shared + [200])
    table.write(2, 0, shared[:38] + [300, 301, 302])  # diverges at position 38
    spec = _decode_spec([0, 1], [43, 42], [102, 201])
    assert ForwardBatch.from_spec(spec, table, "cpu", detect_shared_prefix=True).shared_prefix_len == 40
    assert ForwardBatch.from_spec(spec, table, "cpu").shared_prefix_len == 0  # off by default
    spec3 = _decode_spec([0, 1, 2], [44, 43, 42], [103, 202, 303])
    assert ForwardBatch.from_spec(spec3, table, "cpu", detect_shared_prefix=True).shared_prefix_len == 38
    table.write(3, 0, [7] + shared)  # shares nothing from position 0
    spec4 = _decode_spec([0, 3], [45, 42], [104, 400])
    assert ForwardBatch.from_spec(spec4, table, "cpu", detect_shared_prefix=True).shared_prefix_len == 0
    short = _decode_spec([0, 1], [MIN_SHARED_PREFIX_LEN - 1, 44], [105, 203])  # too short to bother
    assert ForwardBatch.from_spec(short, table, "cpu", detect_shared_prefix=True).shared_prefix_len == 0


def test_matmul_fallback_matches_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Devices without torch's fused CPU kernel take the matmul-softmax path: same results."""
    from radixlm.kernels import torch_ops

    monkeypatch.setattr(torch_ops, "_FLASH_CPU", None)
    k, v = _pools(2)
    indptr, indices = _batch(48, [0, 6, 1, 11], seed=10)
    q = torch.randn(4, 8, HEAD_DIM, generator=torch.Generator().manual_seed(2))
    for shared in (48, 0):
        _check(q, k, v, indptr, indices, shared)
