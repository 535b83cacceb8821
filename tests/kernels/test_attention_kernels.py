"""Kernels against their torch references on the CPU: the Triton kernels under the interpreter
(``TRITON_INTERPRET=1``) and the fast torch ops the CPU engine uses.

Triton fixes interpreted-or-compiled when it is first imported, so the Triton tests are decorated
``@interpreted`` (``kernels/testing/interpreted.py``): they run in this process when it can be put in
interpreter mode, else in one child pytest with ``TRITON_INTERPRET=1``.

Tolerances: float32 atol/rtol 1e-5 (1e-4 for the interpreter's flash-attention, which sums in a
different order); bfloat16 2e-2 (one bf16 ulp of outputs in [2, 4) is 1.6e-2, and the interpreter
truncates float32 -> bfloat16 instead of rounding to nearest).
"""

from __future__ import annotations

import random
import re

import pytest
import torch
from radixlm.kernels import get_ops, select_backend
from radixlm.kernels.attention_ref import (
    apply_token_bitmask_ref,
    decode_attention_ref,
    extend_attention_ref,
    store_kv_ref,
)
from radixlm.kernels.testing.interpreted import interpreted
from radixlm.kernels.testing.random_batch import random_paged_batch

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}
TRITON_TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _ragged(seed: int, bs: int, max_extend: int = 64, long_prefix: int = 150) -> tuple[list[int], list[int]]:
    """Prefixes cycling through none / short / long; extends 1..max_extend (one of them 1)."""
    rng = random.Random(seed)
    choices = [lambda: 0, lambda: rng.randint(1, 12), lambda: rng.randint(long_prefix // 2, long_prefix)]
    prefix = [choices[i % 3]() for i in range(bs)]
    extend = [1] + [rng.randint(1, max_extend) for _ in range(bs - 1)]
    rng.shuffle(extend)
    return prefix, extend


def _close(out: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


# ---------------------------------------------------------------- Triton kernels (interpreter)

EXTEND_CASES = [  # (group, head_dim, dtype)
    (1, 32, torch.float32), (2, 64, torch.float32), (4, 128, torch.float32), (8, 64, torch.float32),
    (2, 96, torch.float32), (4, 32, torch.bfloat16), (2, 64, torch.bfloat16),
]


@pytest.mark.parametrize("group,head_dim,dtype", EXTEND_CASES)
@interpreted
def test_triton_extend_matches_reference(group, head_dim, dtype):
    prefix, extend = _ragged(seed=group * 1000 + head_dim, bs=3)
    kv_heads = 2 if group <= 2 else 1
    b = random_paged_batch(prefix, extend, num_heads=group * kv_heads, num_kv_heads=kv_heads,
                           head_dim=head_dim, dtype=dtype, seed=head_dim)
    _close(get_ops("triton").extend_attention(*b.extend_args()), extend_attention_ref(*b.extend_args()), TRITON_TOL[dtype])


@interpreted
def test_triton_extend_strided_q_and_empty_request():
    # q split out of a fused qkv projection (row stride != heads * head_dim); request 1 has no new tokens.
    b = random_paged_batch([5, 7, 0], [9, 0, 40], num_heads=4, num_kv_heads=2, head_dim=32, seed=3)
    qkv = torch.randn(b.q.shape[0], 8 * 32)
    qkv[:, :4 * 32] = b.q.reshape(b.q.shape[0], -1)
    b.q = qkv[:, :4 * 32].view(-1, 4, 32)
    assert not b.q.is_contiguous()
    _close(get_ops("triton").extend_attention(*b.extend_args()), extend_attention_ref(*b.extend_args()), 1e-4)


DECODE_CASES = [  # (group, head_dim, dtype, num_kv_splits)
    (1, 32, torch.float32, 1), (2, 64, torch.float32, 4), (4, 128, torch.float32, 3),
    (8, 64, torch.float32, 2), (4, 32, torch.bfloat16, 4),
]


@pytest.mark.parametrize("group,head_dim,dtype,splits", DECODE_CASES)
@interpreted
def test_triton_decode_matches_reference(group, head_dim, dtype, splits):
    rng = random.Random(group + head_dim)
    kv = [1, rng.randint(2, 9), rng.randint(100, 200)]  # 1 key: most splits are empty
    b = random_paged_batch([n - 1 for n in kv], [1] * len(kv), num_heads=2 * group, num_kv_heads=2,
                           head_dim=head_dim, dtype=dtype, seed=group)
    out = get_ops("triton").decode_attention(*b.decode_args(), num_kv_splits=splits)
    _close(out, decode_attention_ref(*b.decode_args()), TRITON_TOL[dtype])


@pytest.mark.parametrize("src_dtype,pool_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                                  (torch.float32, torch.float16), (torch.float32, torch.bfloat16)])
@interpreted
def test_triton_store_kv_matches_reference(src_dtype, pool_dtype):
    pools = [torch.zeros(40, 2, 32, dtype=pool_dtype) for _ in range(4)]
    kv = torch.randn(6, 3, 2, 32).to(src_dtype)
    k, v = kv[:, 1], kv[:, 2]  # strided views, as split from a fused qkv
    loc = torch.tensor([5, 1, 39, 17, 2, 30], dtype=torch.int32)
    get_ops("triton").store_kv(pools[0], pools[1], loc, k, v)
    store_kv_ref(pools[2], pools[3], loc.long(), k, v)
    # The interpreter truncates float32 -> bfloat16 where torch rounds: at most one ulp apart.
    tol = 2 ** -7 if (src_dtype, pool_dtype) == (torch.float32, torch.bfloat16) else 0.0
    torch.testing.assert_close(pools[0], pools[2], atol=0, rtol=tol)
    torch.testing.assert_close(pools[1], pools[3], atol=0, rtol=tol)
    untouched = torch.ones(40, dtype=torch.bool)
    untouched[loc.long()] = False
    assert not pools[0][untouched].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab,words", [(1000, 32), (4100, 129), (64, 3)])
@interpreted
def test_triton_bitmask_matches_reference(dtype, vocab, words):
    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(3, vocab, generator=gen).to(dtype)
    bitmask = torch.randint(-2 ** 31, 2 ** 31 - 1, (3, words), dtype=torch.int32, generator=gen)
    bitmask[0] = -1  # all allowed
    bitmask[1] = 0  # none allowed
    expected = logits.clone()
    apply_token_bitmask_ref(expected, bitmask)
    get_ops("triton").apply_token_bitmask(logits, bitmask)
    assert torch.equal(logits, expected)
    assert not torch.isinf(logits[0]).any() and torch.isinf(logits[1]).all()


@interpreted
def test_triton_rejects_cpu_tensors_without_interpreter(monkeypatch):
    ops = get_ops("triton")  # imported (interpreted) before the variable goes: triton fixes its mode then
    monkeypatch.delenv("TRITON_INTERPRET")
    b = random_paged_batch([2], [1], num_heads=2, num_kv_heads=1, head_dim=16)
    with pytest.raises(ValueError, match="triton backend needs CUDA"):
        ops.decode_attention(*b.decode_args())
    with pytest.raises(ValueError, match="attention_backend 'triton' needs a CUDA device"):
        select_backend("triton", "cpu")


# ---------------------------------------------------------------- fast torch ops (CPU engine path)

@pytest.mark.parametrize("group,head_dim", [(1, 32), (2, 64), (4, 128), (8, 64)])
@pytest.mark.parametrize("max_pad_ratio", [0.0, 2.0, float("inf")])  # per request / heuristic / padded
def test_torch_extend_matches_reference(group, head_dim, max_pad_ratio):
    from radixlm.kernels.torch_ops import extend_attention_torch

    prefix, extend = _ragged(seed=group + head_dim, bs=5, long_prefix=300)
    b = random_paged_batch(prefix, extend, num_heads=2 * group, num_kv_heads=2, head_dim=head_dim, seed=group)
    out = extend_attention_torch(*b.extend_args(), max_pad_ratio=max_pad_ratio)
    _close(out, extend_attention_ref(*b.extend_args()), TOL[torch.float32])


@pytest.mark.parametrize("group,dtype", [(1, torch.float32), (2, torch.float32), (4, torch.float32),
                                         (8, torch.float32), (2, torch.bfloat16), (8, torch.bfloat16)])
def test_torch_decode_matches_reference(group, dtype):
    rng = random.Random(group)
    kv = [1, 2] + [rng.randint(1, 400) for _ in range(6)]
    b = random_paged_batch([n - 1 for n in kv], [1] * len(kv), num_heads=4 * group, num_kv_heads=4,
                           head_dim=64, dtype=dtype, seed=group)
    ops = get_ops("torch")
    _close(ops.decode_attention(*b.decode_args()), decode_attention_ref(*b.decode_args()), TOL[dtype])
    # Decode is the q_len == 1 case of extend.
    _close(ops.extend_attention(*b.extend_args()), decode_attention_ref(*b.decode_args()), TOL[dtype])


KV16 = pytest.mark.parametrize("kv_dtype", [torch.float16, torch.bfloat16])


def _kv16_batch(kv_dtype: torch.dtype, extend: bool):
    """float32 q over a 16-bit KV pool (the 16-bit KV cache): decode (extend=False) or a ragged extend."""
    prefix, lens = _ragged(seed=7, bs=5, long_prefix=200) if extend else ([0, 63, 64, 150], [1] * 4)
    b = random_paged_batch(prefix, lens, num_heads=8, num_kv_heads=2, head_dim=32, seed=3)
    b.k_pool, b.v_pool = b.k_pool.to(kv_dtype), b.v_pool.to(kv_dtype)
    return b


@KV16
@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
def test_torch_ops_over_a_16_bit_pool_match_reference(kv_dtype, native):
    """The reference widens the same 16-bit values, so float32 tolerances hold (native: float16 pools only)."""
    import contextlib

    from radixlm.kernels import cpu_native

    ops = get_ops("torch")
    with contextlib.nullcontext() if native else cpu_native.torch_only():
        for extend in (False, True):
            b = _kv16_batch(kv_dtype, extend)
            ref = extend_attention_ref(*b.extend_args())
            assert ref.dtype == torch.float32
            _close(ops.extend_attention(*b.extend_args()), ref, TOL[torch.float32])
            if not extend:
                _close(ops.decode_attention(*b.decode_args()), ref, TOL[torch.float32])


@KV16
@interpreted
def test_triton_over_a_16_bit_pool_matches_reference(kv_dtype):
    ops = get_ops("triton")
    for extend in (False, True):
        b = _kv16_batch(kv_dtype, extend)
        ref = extend_attention_ref(*b.extend_args())
        _close(ops.extend_attention(*b.extend_args()), ref, TRITON_TOL[torch.float32])
        if not extend:
            _close(ops.decode_attention(*b.decode_args()), ref, TRITON_TOL[torch.float32])


def test_torch_ops_empty_batch_and_bf16_extend():
    ops = get_ops("torch")
    b = random_paged_batch([], [], num_heads=2, num_kv_heads=1, head_dim=16)
    assert ops.extend_attention(*b.extend_args()).shape == (0, 2, 16)
    assert ops.decode_attention(*b.decode_args()).shape == (0, 2, 16)
    b = random_paged_batch([0, 30], [17, 5], num_heads=4, num_kv_heads=2, head_dim=32, dtype=torch.bfloat16)
    _close(ops.extend_attention(*b.extend_args()), extend_attention_ref(*b.extend_args()), TOL[torch.bfloat16])


@pytest.mark.parametrize("vocab,words", [(1000, 32), (4100, 129), (64, 3)])
def test_torch_bitmask_matches_reference(vocab, words):
    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(3, vocab, generator=gen)
    bitmask = torch.randint(-2 ** 31, 2 ** 31 - 1, (3, words), dtype=torch.int32, generator=gen)
    expected = logits.clone()
    apply_token_bitmask_ref(expected, bitmask)
    get_ops("torch").apply_token_bitmask(logits, bitmask)
    assert torch.equal(logits, expected)


def test_torch_store_kv_and_bitmask_match_reference():
    ops = get_ops("torch")
    pools = [torch.zeros(20, 2, 8, dtype=torch.bfloat16) for _ in range(4)]
    k, v = torch.randn(2, 5, 2, 8).unbind(0)
    loc = torch.tensor([3, 19, 1, 7, 8], dtype=torch.int32)
    ops.store_kv(pools[0], pools[1], loc, k, v)
    store_kv_ref(pools[2], pools[3], loc, k, v)
    assert torch.equal(pools[0], pools[2]) and torch.equal(pools[1], pools[3])
    logits = torch.randn(2, 70)
    bitmask = torch.tensor([[-1, 0x0F0F0F0F, 0x3], [0, -(2 ** 31), 1]], dtype=torch.int32)
    expected = logits.clone()
    apply_token_bitmask_ref(expected, bitmask)
    ops.apply_token_bitmask(logits, bitmask)
    assert torch.equal(logits, expected)


# ---------------------------------------------------------------- contracts and wrapper errors

def _bad_calls():
    b = random_paged_batch([3, 0], [1, 1], num_heads=4, num_kv_heads=2, head_dim=16)
    q, kp, vp, kvi, kvx, s = b.decode_args()
    return [
        ("decode", (q, kp, vp.half(), kvi, kvx, s), TypeError, "v_pool dtype"),
        ("decode", (q.int(), kp, vp, kvi, kvx, s), TypeError, "q must have dtype"),
        ("decode", (q[:, :3], kp, vp, kvi, kvx, s), ValueError, "not a multiple of k_pool num_kv_heads"),
        ("decode", (q[..., :8], kp, vp, kvi, kvx, s), ValueError, "head_dim 8 differs"),
        ("decode", (q[..., ::2], kp[..., ::2], vp[..., ::2], kvi, kvx, s), ValueError, "contiguous in its last dim"),
        ("decode", (q, kp, vp[:-1], kvi, kvx, s), ValueError, "v_pool shape"),
        ("decode", (q, kp, vp, kvi[:-1], kvx, s), ValueError, "kv_indptr must have bs + 1 = 3"),
        ("decode", (q, kp, vp, kvi.float(), kvx, s), TypeError, "kv_indptr must have dtype"),
        ("decode", (q, kp, vp, kvi, kvx.tolist(), s), TypeError, "kv_indices must be a torch.Tensor"),
        ("decode", (q, kp, vp, kvi, kvx, -1.0), ValueError, "sm_scale must be positive"),
        ("decode", (q, kp, vp, kvi, kvx, "0.1"), TypeError, "sm_scale must be a float"),
        ("decode", (q[0], kp, vp, kvi, kvx, s), ValueError, "q must be 3-D"),
        ("extend", (q, kp, vp, kvi[:2], kvi, kvx, s), ValueError, "qo_indptr has 2 entries"),
        ("store_kv", (kp, vp, kvx[:3], q[:, :2], q[:, :2]), ValueError, "k has 2 tokens but loc has 3"),
        ("store_kv", (kp, vp, kvx[:2], q[:, :2, :8], q[:, :2]), ValueError, "k rows (2, 8) differ"),
        ("store_kv", (kp, vp, kvx[:2].float(), q[:, :2], q[:, :2]), TypeError, "loc must have dtype"),
        ("bitmask", (torch.zeros(2, 70), torch.zeros(2, 2, dtype=torch.int32)), ValueError, "vocab 70 needs 3"),
        ("bitmask", (torch.zeros(2, 70), torch.zeros(2, 3)), TypeError, "bitmask must have dtype"),
        ("bitmask", (torch.zeros(2, 70), torch.zeros(1, 3, dtype=torch.int32)), ValueError, "bitmask has 1 rows"),
        ("bitmask", (torch.zeros(70), torch.zeros(1, 3, dtype=torch.int32)), ValueError, "logits must be 2-D"),
    ]


OP_NAMES = {"decode": "decode_attention", "extend": "extend_attention", "store_kv": "store_kv",
            "bitmask": "apply_token_bitmask"}


@pytest.mark.parametrize("backend", ["torch", "triton"])
@interpreted
def test_wrappers_reject_bad_input_with_clear_errors(backend):
    ops = get_ops(backend)
    for op, args, exc, message in _bad_calls():
        with pytest.raises(exc, match=re.escape(message)):
            getattr(ops, OP_NAMES[op])(*args)


def test_get_ops_contract_and_backend_selection():
    names = {"extend_attention", "decode_attention", "store_kv", "apply_token_bitmask"}
    assert set(vars(get_ops("torch"))) == names
    with pytest.raises(ValueError, match="unknown attention backend 'flash'"):
        get_ops("flash")
    assert select_backend("auto", "cpu") == "torch"
    assert select_backend("torch", "cpu") == "torch"
    with pytest.raises(ValueError, match="attention_backend must be one of"):
        select_backend("cuda", "cpu")
