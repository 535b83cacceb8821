"""Cascade extend attention (a prefix shared by the whole batch, attended once) in the torch kernels,
its detection for extend batches in ForwardBatch, and cached vs uncached greedy equality through it."""

from __future__ import annotations

import contextlib

import pytest
import torch
from radixlm.kernels import cpu_native, extend_attention_ref
from radixlm.kernels.torch_ops import extend_attention_torch
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import ReqToTokenTable
from radixlm.runtime.scheduler.batch import BatchSpec

from radixlm import Engine

HEAD_DIM = 16
NUM_SLOTS = 900


def _batch(prefix_len: int, own_prefix: list[int], extend: list[int], kv_heads: int, group: int,
           seed: int) -> tuple:
    """Extend args where every request's context starts with the same ``prefix_len`` (shuffled)
    slots, then ``own_prefix[i]`` cached slots of its own, then ``extend[i]`` new ones."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(NUM_SLOTS - 1, generator=g) + 1  # slot 0 is padding
    shared, rest = perm[:prefix_len], perm[prefix_len:]
    pieces, start = [], 0
    for n in (a + b for a, b in zip(own_prefix, extend)):
        pieces.append(torch.cat([shared, rest[start:start + n]]))
        start += n
    pad = torch.nn.functional.pad
    kv_indptr = pad(torch.tensor([len(p) for p in pieces]).cumsum(0), (1, 0))
    qo_indptr = pad(torch.tensor(extend).cumsum(0), (1, 0))
    k = torch.randn(NUM_SLOTS, kv_heads, HEAD_DIM, generator=g)
    v = torch.randn(NUM_SLOTS, kv_heads, HEAD_DIM, generator=g)
    q = torch.randn(sum(extend), kv_heads * group, HEAD_DIM, generator=g)
    return q, k, v, qo_indptr, kv_indptr, torch.cat(pieces), 0.25


def _check(args: tuple, shared: int, atol: float = 1e-5, **kw) -> torch.Tensor:
    ref = extend_attention_ref(*args)
    out = extend_attention_torch(*args, shared_prefix_len=shared, **kw)
    assert out.dtype == args[0].dtype and out.shape == args[0].shape
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=atol)
    return out


@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.float16], ids=["kv32", "kv16"])
@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
@pytest.mark.parametrize("group", [1, 2, 7])
@pytest.mark.parametrize("kv_heads", [1, 2])
def test_cascade_extend_matches_reference(group: int, kv_heads: int, native: bool, kv_dtype: torch.dtype) -> None:
    """Both paths: the native cascade kernel (34 queries x 7 heads per KV head = 238 rows, more than
    one phase-1 piece of 192) and torch's (flash for the prefix, padded suffixes); float32 q over float32
    or float16 pools (the 16-bit KV cache: the reference widens the same values)."""
    if native and not cpu_native.available():
        pytest.skip("the native CPU kernels are not available on this machine")
    q, k, v, *rest = _batch(120, [0, 3, 0, 11, 1], [5, 1, 17, 9, 2], kv_heads, group, seed=group + kv_heads)
    args = (q, k.to(kv_dtype), v.to(kv_dtype), *rest)
    with contextlib.nullcontext() if native else cpu_native.torch_only():
        for shared in (120, 60, 1, 0):  # the whole shared prefix, part of it (the rest is suffix), none
            _check(args, shared)


def test_cascade_extend_native_long_prefix_and_head_dim_64() -> None:
    """The engine's shapes: head dim 64 (register tiles, full and partial 64-key chunks of a 203-key
    prefix), 2 query heads per KV head, an extend of 150 tokens next to short ones."""
    if not cpu_native.available():
        pytest.skip("the native CPU kernels are not available on this machine")
    g = torch.Generator().manual_seed(11)
    slots = torch.randperm(599, generator=g) + 1
    shared, rest = slots[:203], slots[203:]
    own, extend = [0, 4, 30], [150, 3, 20]
    pieces, start = [], 0
    for n in (a + b for a, b in zip(own, extend)):
        pieces.append(torch.cat([shared, rest[start:start + n]]))
        start += n
    kv_indptr = torch.nn.functional.pad(torch.tensor([len(p) for p in pieces]).cumsum(0), (1, 0))
    qo_indptr = torch.nn.functional.pad(torch.tensor(extend).cumsum(0), (1, 0))
    k, v = torch.randn(600, 4, 64, generator=g), torch.randn(600, 4, 64, generator=g)
    q = torch.randn(sum(extend), 8, 64, generator=g)
    args = (q, k, v, qo_indptr, kv_indptr, torch.cat(pieces), 0.125)
    _check(args, 203, max_pad_ratio=float("inf"))


def test_cascade_extend_single_request_and_padding_fallback() -> None:
    _check(_batch(50, [0], [9], 2, 2, seed=3), 50)  # bs = 1: the "shared" prefix is its cache
    # one long extend among short ones: padding the suffix would waste more than max_pad_ratio,
    # so the per-request path runs (same result)
    args = _batch(40, [0, 0, 0], [200, 1, 1], 2, 2, seed=4)
    _check(args, 40)
    _check(args, 40, max_pad_ratio=float("inf"))  # forced cascade with heavy padding: still exact


def test_cascade_extend_matmul_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch's fused CPU kernel the lse comes from the matmul-softmax path: same results."""
    from radixlm.kernels import torch_ops

    monkeypatch.setattr(torch_ops, "_FLASH_CPU", None)
    _check(_batch(64, [2, 0, 5], [3, 8, 1], 2, 4, seed=5), 64)


def test_cascade_extend_rejects_a_prefix_past_the_cache() -> None:
    args = _batch(30, [0, 4], [6, 2], 1, 2, seed=6)  # cached prefixes 30 and 34
    with pytest.raises(ValueError, match="shared_prefix_len"):
        extend_attention_torch(*args, shared_prefix_len=31)
    with pytest.raises(TypeError, match="shared_prefix_len"):
        extend_attention_torch(*args, shared_prefix_len=3.0)


def test_from_spec_detects_an_extend_batch_shared_prefix() -> None:
    table = ReqToTokenTable(3, 128, "cpu")
    shared = list(range(1, 41))
    table.write(0, 0, shared)
    table.write(1, 0, shared + [200, 201])
    spec = BatchSpec(is_decode=False, req_pool_indices=[0, 1], input_ids=[5] * 5, prefix_lens=[40, 42],
                     extend_lens=[3, 2], out_cache_loc=[101, 102, 103, 202, 203], logits_indices=[2, 4])
    fb = ForwardBatch.from_spec(spec, table, "cpu", detect_shared_prefix=True)
    assert fb.shared_prefix_len == 40
    table.write(2, 0, shared[:35])  # its cached prefix stops at 35: the shared part must too
    spec3 = BatchSpec(is_decode=False, req_pool_indices=[0, 2], input_ids=[5] * 2, prefix_lens=[43, 35],
                      extend_lens=[1, 1], out_cache_loc=[104, 300], logits_indices=[0, 1])
    assert ForwardBatch.from_spec(spec3, table, "cpu", detect_shared_prefix=True).shared_prefix_len == 35


@pytest.mark.parametrize("kv_cache_dtype", ["float16", "float32"])
def test_engine_cached_equals_uncached_through_the_cascade(tiny_llama, monkeypatch: pytest.MonkeyPatch,
                                                           kv_cache_dtype: str) -> None:
    """Requests admitted together behind a cached shared prefix take the cascade extend; their greedy
    outputs equal the engine's without the radix cache (every request computed from scratch), with a
    16-bit and a float32 KV cache."""
    from radixlm.kernels import torch_ops

    calls: list[int] = []
    real = torch_ops._extend_cascade

    def spy(*args, **kwargs):
        calls.append(args[9])  # the shared prefix length
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_ops, "_extend_cascade", spy)
    system = "System: you are a careful agent; call one tool per turn, then answer in plain words. " * 3
    prompts = [f"{system}User {i}: find {i * 7} cheap flights to city number {i}." for i in range(6)]
    params = {"temperature": 0.0, "max_new_tokens": 8, "ignore_eos": True}
    outs = {}
    for cache in (True, False):
        with Engine(tiny_llama, max_total_tokens=4096, disable_radix_cache=not cache,
                    kv_cache_dtype=kv_cache_dtype) as engine:
            assert engine.runner.kv_pool.dtype == getattr(torch, kv_cache_dtype)
            outs[cache] = [o["output_ids"] for o in engine.generate(prompts, params)]
            engine.check_no_leak()
        if cache:
            assert calls and min(calls) >= 32  # the 5 requests after the first one shared its prefix
            calls.clear()
    assert not calls  # without the cache no prefix is shared
    assert outs[True] == outs[False]
