"""The native CPU decode kernels (``kernels/cpu_native``) against their torch references, the
model's native decode path against its torch path, and the fallbacks (switched off, no compiler).

Tolerances: dot products sum in 8 lanes (16 with AVX-512F at 2+ rows), a different order than
MKL, so float32 results agree to ~1e-5 relative; RoPE has no FMA contraction and must match torch
exactly. Every attention and KV-store test runs with float32 and with float16 pools (the 16-bit KV
cache): the reference reads the same float16 values widened to float32, so the tolerance is the same;
the store rounds to nearest even exactly as ``.to(torch.float16)``.
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from native_checks import assert_rel_close as _close
from native_checks import decode_logits
from radixlm.kernels import cpu_native
from radixlm.kernels.attention_ref import decode_attention_ref
from radixlm.kernels.testing.random_batch import random_paged_batch
from radixlm.kernels.torch_ops import decode_attention_torch, store_kv_torch
from radixlm.runtime.model.attention import RotaryEmbedding, apply_rotary

pytestmark = pytest.mark.skipif(cpu_native._unsupported_reason() is not None,
                                reason=f"no native CPU kernels here: {cpu_native._unsupported_reason()}")


@pytest.fixture(scope="module", autouse=True)
def native():
    assert cpu_native.available(), "the native kernels must build on an AVX2 Linux machine with a C compiler"


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 13, 16, 64])
@pytest.mark.parametrize("out_features,in_features", [(256, 64), (37, 100), (1030, 12), (5, 7), (45, 1040)])
def test_linear_matches_f_linear(rows, out_features, in_features):
    gen = torch.Generator().manual_seed(rows * out_features + in_features)
    x, w = torch.randn(rows, in_features, generator=gen), torch.randn(out_features, in_features, generator=gen)
    bias, add = torch.randn(out_features, generator=gen), torch.randn(rows, out_features, generator=gen)
    _close(cpu_native.linear(x, w), F.linear(x, w))
    _close(cpu_native.linear(x, w, bias, add), F.linear(x, w, bias) + add)


@pytest.mark.parametrize("rows", [1, 3, 4, 6, 16])
@pytest.mark.parametrize("inter,hidden", [(96, 64), (35, 40), (1, 8)])
def test_gate_up_silu_matches_reference(rows, inter, hidden):
    gen = torch.Generator().manual_seed(rows + inter)
    x, w = torch.randn(rows, hidden, generator=gen), torch.randn(2 * inter, hidden, generator=gen)
    gate, up = F.linear(x, w).split(inter, dim=-1)
    _close(cpu_native.gate_up_silu(x, w), F.silu(gate) * up)


@pytest.mark.parametrize("rows,dim", [(1, 64), (3, 100), (80, 1024)])  # 80 x 1024: the threaded loop
def test_rmsnorm_with_and_without_residual(rows, dim):
    from radixlm.runtime.model.llama import RMSNorm

    gen = torch.Generator().manual_seed(dim)
    x, add, weight = (torch.randn(rows, dim, generator=gen), torch.randn(rows, dim, generator=gen),
                      torch.randn(dim, generator=gen))
    norm = RMSNorm(dim, 1e-5, torch.float32, "cpu")
    norm.weight.data.copy_(weight)
    with cpu_native.torch_only():
        ref, ref_sum = norm(x), norm(x + add)
    _close(cpu_native.rmsnorm(x.clone(), weight, 1e-5), ref)
    h = x.clone()
    _close(cpu_native.rmsnorm(h, weight, 1e-5, add), ref_sum)
    assert torch.equal(h, x + add)  # the residual sum is written back in place


KV_DTYPES = pytest.mark.parametrize("kv_dtype", [torch.float32, torch.float16], ids=["kv32", "kv16"])


@KV_DTYPES
@pytest.mark.parametrize("heads,kv_heads,head_dim,tokens", [(4, 2, 16, 5), (8, 8, 64, 37), (6, 1, 128, 5),
                                                            (2, 1, 12, 3)])  # 12: the store's scalar tail
def test_rope_store_kv_equals_torch_exactly(heads, kv_heads, head_dim, tokens, kv_dtype):
    slots = 64  # 37 tokens: several work items of 16
    gen = torch.Generator().manual_seed(heads * head_dim)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=gen)
    positions = torch.randint(0, 9000, (tokens,), generator=gen)
    cos, sin = RotaryEmbedding(head_dim, 10000.0, None).cos_sin(positions, torch.float32)
    loc = torch.randperm(slots, generator=gen)[:tokens]
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q_ref = apply_rotary(q.reshape(tokens, heads, head_dim), cos, sin)
    k_ref = apply_rotary(k.reshape(tokens, kv_heads, head_dim), cos, sin)
    kp_ref = torch.zeros(slots, kv_heads, head_dim, dtype=kv_dtype)
    vp_ref = torch.zeros(slots, kv_heads, head_dim, dtype=kv_dtype)
    store_kv_torch(kp_ref, vp_ref, loc, k_ref, v.reshape(tokens, kv_heads, head_dim))
    k_pool, v_pool = torch.zeros_like(kp_ref), torch.zeros_like(vp_ref)
    cpu_native.rope_store_kv(qkv, heads, kv_heads, head_dim, cos, sin, loc, k_pool, v_pool)
    assert torch.equal(qkv[:, :heads * head_dim].reshape(tokens, heads, head_dim), q_ref)
    assert torch.equal(k_pool, kp_ref) and torch.equal(v_pool, vp_ref)


@KV_DTYPES
@pytest.mark.parametrize("group,head_dim", [(1, 64), (2, 64), (4, 128), (8, 32), (16, 16)])
def test_decode_attention_matches_reference(group, head_dim, kv_dtype):
    rng = random.Random(group)
    kv = [1, 64, 65, 300] + [rng.randint(1, 200) for _ in range(3)]  # around the 64-key chunks
    b = random_paged_batch([n - 1 for n in kv], [1] * len(kv), num_heads=2 * group, num_kv_heads=2,
                           head_dim=head_dim, seed=group)
    b.k_pool, b.v_pool = b.k_pool.to(kv_dtype), b.v_pool.to(kv_dtype)
    indptr, indices = b.kv_indptr.long(), b.kv_indices.long()
    ref = decode_attention_ref(b.q, b.k_pool, b.v_pool, indptr, indices, b.sm_scale)
    _close(cpu_native.decode_attention(b.q, b.k_pool, b.v_pool, indptr, indices, b.sm_scale), ref)
    # two requests: one task per (request, KV head) instead of whole requests per task
    _close(cpu_native.decode_attention(b.q[:2], b.k_pool, b.v_pool, indptr[:3], indices, b.sm_scale), ref[:2])
    # q as the model passes it: rows of a wider fused q/k/v buffer; and through the CPU backend's op
    wide = torch.zeros(b.q.shape[0], b.q[0].numel() + 24)
    wide[:, :b.q[0].numel()] = b.q.reshape(b.q.shape[0], -1)
    strided = wide[:, :b.q[0].numel()].view(b.q.shape)
    _close(decode_attention_torch(strided, b.k_pool, b.v_pool, indptr, indices, b.sm_scale), ref)


@KV_DTYPES
def test_model_decode_native_matches_torch_path(checkpoint, monkeypatch, kv_dtype):
    """Tiny Llama, Qwen2 (q/k/v bias) and Qwen3 (q/k norms): a prefill, then decode steps of batch 3,
    through the native kernels (the fused decode layer; GEMV, norm, RoPE + store in the prefill) and
    through the torch ops, with a float32 and a float16 KV pool."""
    calls = []
    names = ("linear", "gate_up_silu", "rmsnorm", "rope_store_kv", "decode_layer")
    for name in names:
        fn = getattr(cpu_native, name)
        monkeypatch.setattr(cpu_native, name, lambda *a, _fn=fn, _name=name, **k: calls.append(_name) or _fn(*a, **k))
    from radixlm.runtime.model.model_loader import load_model

    for arch in ("llama", "qwen2", "qwen3"):
        model, cfg = load_model(checkpoint(arch, "tiny"), dtype="float32", device="cpu", attention_backend="torch")
        runs = [decode_logits(model, cfg, native, kv_dtype=kv_dtype) for native in (True, False)]
        if kv_dtype == torch.float32:
            assert (runs[0] - runs[1]).abs().max().item() <= 1e-4, arch
        else:  # a float32 difference (summation order) that crosses a float16 rounding boundary of a
            # stored key is one float16 ulp (2^-11 relative) there: logits agree to ~1e-3 of their scale
            _close(runs[0], runs[1], rtol=4e-3)
    assert set(calls) == set(names)


_BOTH_TILE_SETS = """
import torch, torch.nn.functional as F
from native_checks import assert_rel_close
from radixlm.kernels import cpu_native
assert cpu_native.available()
gen = torch.Generator().manual_seed(0)
for rows in (1, 2, 3, 4, 7, 64):
    for n, k in ((50, 1024), (13, 100), (9, 17)):
        x, w, b = torch.randn(rows, k, generator=gen), torch.randn(n, k, generator=gen), torch.randn(n, generator=gen)
        assert_rel_close(cpu_native.linear(x, w, b), F.linear(x, w, b))
print("ok")
"""


@pytest.mark.parametrize("avx512", ["0", "1"])
def test_both_float32_tile_sets_match_f_linear(avx512):
    """The 16-lane (AVX-512F) tiles where the CPU has them, and the 8-lane ones they can be forced to
    (``RADIXLM_NATIVE_AVX512=0``); the C side reads the switch once per process, hence a subprocess."""
    env = {**os.environ, "RADIXLM_NATIVE_AVX512": avx512,
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _BOTH_TILE_SETS], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_torch_only_and_disable_env_switch_the_kernels_off(monkeypatch):
    x, w = torch.randn(2, 8), torch.randn(4, 8)
    assert cpu_native.usable(x, w) and not cpu_native.usable(x.t(), w) and not cpu_native.usable(x.double(), w)
    with cpu_native.torch_only():
        assert not cpu_native.available() and not cpu_native.usable(x, w)
    assert cpu_native.available()
    monkeypatch.setenv(cpu_native.DISABLE_ENV, "1")
    assert cpu_native._unsupported_reason() is not None


def test_a_failed_build_falls_back_to_torch(monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="radixlm.kernels")  # an Engine(log_level=...) may have raised it
    monkeypatch.setattr(cpu_native, "_lib", None)
    monkeypatch.setattr(cpu_native, "_tried", False)
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path))  # nothing cached: it must compile
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert cpu_native.library() is None and not cpu_native.available()
    assert "native CPU kernels unavailable" in caplog.text
    line = cpu_native.describe()  # the start-up line's words: the fallback and the compiler's complaint
    assert line.startswith("torch ops (native CPU kernels: the build failed: compiling ") and "no-such-compiler" in line
    assert not list((tmp_path / "native").glob("*.so"))  # no half-written library left behind


@KV_DTYPES
@pytest.mark.parametrize("shared", [0, 1, 40, 150])
def test_cascade_decode_native_and_torch_paths_match_reference(shared, kv_dtype):
    """A shared prefix read once for the batch (cascade) natively; the torch path kept for other dtypes.
    16 query rows share each KV head: the prefix chunks are scored transposed (150: two full chunks
    and a tail)."""
    gen = torch.Generator().manual_seed(shared)
    k_pool = torch.randn(400, 2, 32, generator=gen).to(kv_dtype)
    v_pool = torch.randn(400, 2, 32, generator=gen).to(kv_dtype)
    slots = torch.randperm(399, generator=gen) + 1
    prefix, rest = slots[:max(40, shared)], slots[max(40, shared):]
    suffixes = [0, 3, 17, 70]  # request 0 is exactly the prefix
    pieces = [torch.cat([prefix, rest[sum(suffixes[:i]):sum(suffixes[:i + 1])]]) for i in range(len(suffixes))]
    indptr = F.pad(torch.tensor([len(p) for p in pieces]).cumsum(0), (1, 0))
    indices = torch.cat(pieces)
    q = torch.randn(len(pieces), 8, 32, generator=gen)
    ref = decode_attention_ref(q, k_pool, v_pool, indptr, indices, 0.3)
    _close(cpu_native.decode_attention(q, k_pool, v_pool, indptr, indices, 0.3, shared), ref)
    with cpu_native.torch_only():
        _close(decode_attention_torch(q, k_pool, v_pool, indptr, indices, 0.3, shared_prefix_len=shared), ref)


@KV_DTYPES
@pytest.mark.parametrize("head_dim", [64, 24])  # 24: P.V row by row (the register tile spans 16 lanes)
def test_cascade_decode_in_several_pieces_matches_reference(head_dim, kv_dtype):
    """40 requests x 8 query heads per KV head = 320 rows per KV head: phase 1 runs in two pieces of
    160, each over the whole 150-key prefix (two full 64-key chunks and a tail), and phase 2
    continues every request over its own suffix, of 0 to 20 keys."""
    gen = torch.Generator().manual_seed(7)
    k_pool = torch.randn(1200, 2, head_dim, generator=gen).to(kv_dtype)
    v_pool = torch.randn(1200, 2, head_dim, generator=gen).to(kv_dtype)
    slots = torch.randperm(1199, generator=gen) + 1
    prefix, rest = slots[:150], slots[150:]
    lens = [(7 * i) % 21 for i in range(40)]
    starts = [sum(lens[:i]) for i in range(40)]
    pieces = [torch.cat([prefix, rest[s:s + n]]) for s, n in zip(starts, lens)]
    indptr = F.pad(torch.tensor([len(p) for p in pieces]).cumsum(0), (1, 0))
    indices = torch.cat(pieces)
    q = torch.randn(40, 16, head_dim, generator=gen)
    ref = decode_attention_ref(q, k_pool, v_pool, indptr, indices, 0.125)
    _close(cpu_native.decode_attention(q, k_pool, v_pool, indptr, indices, 0.125, 150), ref)
