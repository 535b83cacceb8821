"""Compiled Triton kernels on a CUDA GPU against the torch references, at realistic sizes
(Llama-3-8B / Qwen2-7B-like head layouts, prefixes up to 4k, contexts up to 8k). Skipped without
CUDA. Run alone (``pytest tests/kernels/test_cuda_kernels.py``) or via ``benchmarks/gpu_check.sh``.

Tolerances: float32 1e-4 (the kernels use IEEE fp32 dots, not TF32), float16 2e-3, bfloat16 2e-2
(probabilities are rounded to the value dtype before the P @ V product, as in flash-attention).
"""

from __future__ import annotations

import random

import pytest
import torch
from radixlm.kernels import get_ops, select_backend
from radixlm.kernels.attention_ref import (
    apply_token_bitmask_ref,
    decode_attention_ref,
    extend_attention_ref,
    store_kv_ref,
)
from radixlm.kernels.testing.random_batch import random_paged_batch
from radixlm.kernels.triton_mode import interpreter_enabled

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

TOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 2e-2}
LAYOUTS = [  # (num_heads, num_kv_heads, head_dim)
    (32, 8, 128),  # Llama-3-8B: group 4
    (28, 4, 128),  # Qwen2-7B: group 7 (not a power of two)
    (16, 16, 64),  # group 1
    (32, 4, 96),  # head_dim 96, group 8
    (8, 4, 256),  # head_dim 256, group 2
    (8, 4, 32),  # the tiny test checkpoint's head_dim
]


@pytest.fixture(scope="module")
def ops():
    if interpreter_enabled():
        pytest.fail("TRITON_INTERPRET is set: unset it to test the compiled kernels")
    return get_ops("triton")


def _close(out: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


# Every layout in bfloat16 (the serving dtype), the others on two layouts: each case compiles.
CASES = [(*layout, torch.bfloat16) for layout in LAYOUTS] + [
    (32, 8, 128, torch.float16), (32, 8, 128, torch.float32), (8, 4, 32, torch.float32)]


@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim,dtype", CASES)
def test_extend_matches_reference(ops, num_heads, num_kv_heads, head_dim, dtype):
    rng = random.Random(num_heads * head_dim)
    prefix = [0, 0, rng.randint(1, 64), rng.randint(500, 1500), 4000, rng.randint(1, 20)]
    extend = [1, 512, rng.randint(1, 64), rng.randint(100, 300), 64, 1]
    b = random_paged_batch(prefix, extend, num_heads, num_kv_heads, head_dim, dtype, device="cuda", seed=1)
    out = ops.extend_attention(*b.extend_args())
    _close(out, extend_attention_ref(*b.extend_args()), TOL[dtype])
    out2 = ops.extend_attention(*b.extend_args(), max_q_len=max(extend))  # no host sync
    assert torch.equal(out, out2)


@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim,dtype", CASES)
@pytest.mark.parametrize("splits", [None, 1, 7, 16])
def test_decode_matches_reference(ops, num_heads, num_kv_heads, head_dim, dtype, splits):
    rng = random.Random(head_dim + num_heads)
    kv = [1, 2, 8192, 15] + [rng.randint(1, 3000) for _ in range(28)]
    b = random_paged_batch([n - 1 for n in kv], [1] * len(kv), num_heads, num_kv_heads, head_dim, dtype,
                           device="cuda", seed=2)
    out = ops.decode_attention(*b.decode_args(), num_kv_splits=splits)
    _close(out, decode_attention_ref(*b.decode_args()), TOL[dtype])


@pytest.mark.parametrize("src_dtype,pool_dtype", [(torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16),
                                                  (torch.float16, torch.float16), (torch.float32, torch.float32)])
def test_store_kv_exact(ops, src_dtype, pool_dtype):
    pools = [torch.zeros(70000, 8, 128, dtype=pool_dtype, device="cuda") for _ in range(4)]
    qkv = torch.randn(3000, 48, 128, device="cuda").to(src_dtype)
    k, v = qkv[:, 32:40], qkv[:, 40:48]  # strided views of a fused qkv projection
    loc = torch.randperm(69999, device="cuda")[:3000] + 1
    ops.store_kv(pools[0], pools[1], loc.int(), k, v)
    store_kv_ref(pools[2], pools[3], loc, k, v)
    assert torch.equal(pools[0], pools[2]) and torch.equal(pools[1], pools[3])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bitmask_exact(ops, dtype):
    vocab = 128256
    logits = torch.randn(16, vocab, device="cuda").to(dtype)
    bitmask = torch.randint(-2 ** 31, 2 ** 31 - 1, (16, (vocab + 31) // 32), dtype=torch.int32)
    expected = logits.clone()
    apply_token_bitmask_ref(expected, bitmask)
    ops.apply_token_bitmask(logits, bitmask)  # a CPU bitmask, as the grammar matchers fill them
    assert torch.equal(logits, expected)


def test_auto_backend_is_triton_on_cuda():
    assert select_backend("auto", "cuda") == "triton"


def test_engine_triton_matches_torch_on_cuda(tiny_llama):
    from radixlm.runtime.engine.engine import Engine

    prompts = ["System: be brief. " * 4 + f"Question {i}: what is {i} + {i}?" for i in range(6)]
    params = {"temperature": 0.0, "max_new_tokens": 12}
    outs = {}
    for backend in ("triton", "torch"):
        with Engine(tiny_llama, attention_backend=backend, device="cuda", dtype="float32",
                    max_total_tokens=8192) as engine:
            engine.generate(prompts[0], params)  # cache the shared prefix
            outs[backend] = [o["output_ids"] for o in engine.generate(prompts, params)]
    assert outs["triton"] == outs["torch"]
