"""Sliding-window attention (Gemma 3's local layers) against the torch reference.

Random paged batches whose contexts are longer than the window: extend with and without a cached
prefix, decode, and a batch behind a shared (radix-cached) prefix, on the torch path (its native
decode kernel included) and the Triton kernels (interpreted on the CPU). The reference itself is
checked against a brute-force per-query softmax, so the window's off-by-one is pinned once.
"""

from __future__ import annotations

import pytest
import torch
from radixlm.kernels.attention_ref import decode_attention_ref, extend_attention_ref
from radixlm.kernels.contract import check_window, trim_to_window
from radixlm.kernels.testing.interpreted import interpreted
from radixlm.kernels.testing.random_batch import random_paged_batch
from radixlm.kernels.torch_ops import decode_attention_torch, extend_attention_torch

# (prefix_lens, extend_lens): windows of 4 and 8 are shorter than most of these contexts
EXTEND_CASES = [
    ([0], [19]),  # prefill longer than the window
    ([13], [6]),  # prefix-cached extend
    ([0, 11, 3, 20], [9, 2, 17, 1]),  # ragged batch, one request a single token
]


def _brute_force(batch, window: int) -> torch.Tensor:
    """Each query's softmax over exactly the keys at positions ``pos - window + 1 .. pos``."""
    out = torch.empty_like(batch.q)
    qo, kvp = batch.qo_indptr.tolist(), batch.kv_indptr.tolist()
    group = batch.q.shape[1] // batch.k_pool.shape[1]
    for i in range(len(qo) - 1):
        q_len, kv_len = qo[i + 1] - qo[i], kvp[i + 1] - kvp[i]
        slots = batch.kv_indices[kvp[i]:kvp[i + 1]].long()
        for j in range(q_len):
            pos = kv_len - q_len + j
            keys = slots[max(0, pos - window + 1):pos + 1]
            k = batch.k_pool[keys].repeat_interleave(group, 1).transpose(0, 1)  # [H, n, D]
            v = batch.v_pool[keys].repeat_interleave(group, 1).transpose(0, 1)
            scores = (k @ batch.q[qo[i] + j].unsqueeze(-1)).squeeze(-1) * batch.sm_scale  # [H, n]
            out[qo[i] + j] = (scores.softmax(-1).unsqueeze(1) @ v).squeeze(1)
    return out


@pytest.mark.parametrize("prefix_lens,extend_lens", EXTEND_CASES)
def test_reference_window_is_the_last_w_keys(prefix_lens, extend_lens):
    batch = random_paged_batch(prefix_lens, extend_lens, num_heads=4, num_kv_heads=2, head_dim=16, seed=3)
    ref = extend_attention_ref(*batch.extend_args(), sliding_window=4)
    torch.testing.assert_close(ref, _brute_force(batch, 4), rtol=1e-5, atol=1e-5)
    full = extend_attention_ref(*batch.extend_args())
    assert not torch.allclose(ref, full, atol=1e-3)  # the window hides keys in every case here


@pytest.mark.parametrize("window", [1, 4, 8, 64])
@pytest.mark.parametrize("prefix_lens,extend_lens", EXTEND_CASES)
def test_torch_extend_window_matches_reference(prefix_lens, extend_lens, window):
    batch = random_paged_batch(prefix_lens, extend_lens, num_heads=8, num_kv_heads=2, head_dim=32, seed=window)
    ref = extend_attention_ref(*batch.extend_args(), sliding_window=window)
    for max_pad_ratio in (2.0, 1.0):  # padded batch, then request by request
        out = extend_attention_torch(*batch.extend_args(), sliding_window=window, max_pad_ratio=max_pad_ratio)
        torch.testing.assert_close(out, ref, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("window", [1, 5, 8, 40])
def test_torch_decode_window_matches_reference(window):
    # float32 contiguous pools with int64 indices: the native CPU decode kernel when it is built
    batch = random_paged_batch([0, 7, 30, 12], [1, 1, 1, 1], num_heads=8, num_kv_heads=2, head_dim=64, seed=window)
    args = (batch.q, batch.k_pool, batch.v_pool, batch.kv_indptr.long(), batch.kv_indices.long(), batch.sm_scale)
    ref = decode_attention_ref(*args, sliding_window=window)
    torch.testing.assert_close(decode_attention_torch(*args, sliding_window=window), ref, rtol=2e-5, atol=2e-5)
    int32_args = (*batch.decode_args()[:5], batch.sm_scale)  # the padded torch path
    torch.testing.assert_close(decode_attention_torch(*int32_args, sliding_window=window), ref, rtol=2e-5,
                               atol=2e-5)


def test_window_ignores_a_shared_prefix_it_would_hide():
    """Behind a 24-token shared prefix, a window of 6 hides most of it; the cascade is not used."""
    prefix, suffixes = 24, [1, 3, 9]
    batch = random_paged_batch([prefix + 2, prefix, prefix + 5], suffixes, num_heads=4, num_kv_heads=4,
                               head_dim=16, seed=11)
    shared = batch.kv_indices[:prefix].clone()
    kvp = batch.kv_indptr.tolist()
    for i in range(1, len(kvp) - 1):
        batch.kv_indices[kvp[i]:kvp[i] + prefix] = shared  # every request starts with the same slots
    ref = extend_attention_ref(*batch.extend_args(), sliding_window=6)
    out = extend_attention_torch(*batch.extend_args(), sliding_window=6, shared_prefix_len=prefix)
    torch.testing.assert_close(out, ref, rtol=2e-5, atol=2e-5)
    dec = random_paged_batch([prefix] * 3, [1, 1, 1], num_heads=4, num_kv_heads=4, head_dim=16, seed=12)
    dkvp = dec.kv_indptr.tolist()
    for i in range(1, 3):
        dec.kv_indices[dkvp[i]:dkvp[i] + prefix] = dec.kv_indices[:prefix].clone()
    args = (dec.q, dec.k_pool, dec.v_pool, dec.kv_indptr.long(), dec.kv_indices.long(), dec.sm_scale)
    torch.testing.assert_close(decode_attention_torch(*args, sliding_window=6, shared_prefix_len=prefix),
                               decode_attention_ref(*args, sliding_window=6), rtol=2e-5, atol=2e-5)


def test_trim_keeps_exactly_the_keys_some_query_sees():
    kv_indptr = torch.tensor([0, 10, 12, 30])
    kv_indices = torch.arange(100, 130)
    q_lens = torch.tensor([3, 2, 1])
    indptr, indices = trim_to_window(kv_indptr, kv_indices, q_lens, window=4)
    assert indptr.tolist() == [0, 6, 8, 12]  # min(kv_len, q_len + 3)
    assert indices.tolist() == [*range(104, 110), 110, 111, *range(126, 130)]


@pytest.mark.parametrize("bad,error", [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_window_is_refused_by_name(bad, error):
    with pytest.raises(error, match="sliding_window"):
        check_window(bad)


@interpreted
@pytest.mark.parametrize("window", [3, 8])
def test_triton_extend_window_matches_reference(window):
    from radixlm.kernels.extend_attention import extend_attention

    for prefix_lens, extend_lens in EXTEND_CASES:
        batch = random_paged_batch(prefix_lens, extend_lens, num_heads=4, num_kv_heads=2, head_dim=32, seed=window)
        ref = extend_attention_ref(*batch.extend_args(), sliding_window=window)
        torch.testing.assert_close(extend_attention(*batch.extend_args(), sliding_window=window), ref,
                                   rtol=1e-4, atol=1e-4)


@interpreted
@pytest.mark.parametrize("splits", [1, 3])
def test_triton_decode_window_matches_reference(splits):
    from radixlm.kernels.decode_attention import decode_attention

    batch = random_paged_batch([0, 7, 30, 12], [1, 1, 1, 1], num_heads=4, num_kv_heads=2, head_dim=32, seed=splits)
    ref = decode_attention_ref(*batch.decode_args(), sliding_window=5)
    out = decode_attention(*batch.decode_args(), sliding_window=5, num_kv_splits=splits)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
