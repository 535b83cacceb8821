"""The aarch64 build of the GGUF block kernels (and of the float16 KV cache's store and attention),
checked here on x86: cross-compiled with ``aarch64-linux-gnu-gcc`` (``$RADIXLM_AARCH64_CC`` overrides it) and run under ``qemu-aarch64`` through
a small C driver (``aarch64/gguf_driver.c``), its outputs compared with the torch reference computed
here, with ``test_gguf_blocks``'s tolerances: for every block type the engine takes, each aarch64 path
(``scalar``: portable C; ``neon``: the AVX2 code through SIMDe's NEON lowering; ``neon-dotprod``: the
SDOT tiles) and batches 1 to 64. The run-time choice is checked on two emulated CPUs: ``max`` (has
SDOT) and Cortex-A53 (has not). Skips, saying what is missing, without the cross compiler, qemu-user
or SIMDe's headers (``.ci/run`` installs them)."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType
from native_checks import assert_rel_close
from radixlm.kernels import cpu_native, gguf_blocks_native
from radixlm.kernels.gguf_blocks import dequantize
from radixlm.kernels.gguf_blocks_ref import block_linear_ref
from test_gguf_blocks import ALL_TYPES, FLOAT_RTOL, FLOAT_TYPES, act_bound, make_weight

T = GGMLQuantizationType
DRIVER = Path(__file__).parent / "aarch64" / "gguf_driver.c"
CROSS_CC = os.environ.get("RADIXLM_AARCH64_CC", "aarch64-linux-gnu-gcc")
QEMU = "qemu-aarch64"
PATHS = {"scalar": 0, "neon": 1, "neon-dotprod": 3}  # csrc/gguf_blocks.h's GB_ISA_*
BATCHES = (1, 3, 17, 64)  # decode rows, tiles, several tile rows


def _missing() -> str | None:
    if shutil.which(CROSS_CC) is None:
        return f"no aarch64 cross compiler ({CROSS_CC}; apt-get install gcc-aarch64-linux-gnu)"
    if shutil.which(QEMU) is None:
        return f"no {QEMU} (apt-get install qemu-user)"
    try:
        cpu_native.simde_include()
    except RuntimeError as e:
        return str(e)
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


@pytest.fixture(scope="module")
def driver() -> Path:
    """The driver linked statically with the aarch64 library objects, cached per source version."""
    chain = cpu_native.toolchain("linux", "aarch64", compiler=CROSS_CC)
    digest = hashlib.sha256(" ".join((chain.compiler, *chain.compile_flags)).encode())
    for source in (*cpu_native.SOURCES, DRIVER):
        digest.update(source.name.encode() + source.read_bytes())
    exe = cpu_native._cache_dir() / f"aarch64-gguf-driver-{digest.hexdigest()[:16]}"
    if not exe.exists():
        work = exe.with_suffix(f".{os.getpid()}.objs")
        work.mkdir(parents=True, exist_ok=True)
        try:
            objs = cpu_native.compile_objects(chain, [s for s in cpu_native.SOURCES if s.suffix == ".c"] + [DRIVER],
                                              work)
            subprocess.run([CROSS_CC, "-static", "-pthread", *map(str, objs), "-o", str(work / "driver"), "-lm"],
                           check=True, capture_output=True, timeout=cpu_native.COMPILE_TIMEOUT_S)
            os.replace(work / "driver", exe)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return exe


def _cases() -> list[tuple[T, torch.Tensor, object]]:
    gen = torch.Generator().manual_seed(3)
    return [(qtype, torch.randn(m, w.shape[1], generator=gen), w)
            for qtype in ALL_TYPES for w in [make_weight(qtype, seed=int(qtype))] for m in BATCHES]


def _run(driver: Path, cases: list, isa: int, tmp: Path) -> list[torch.Tensor]:
    blob = bytearray(struct.pack("<i", len(cases)))
    for qtype, x, w in cases:
        raw = w.data.contiguous().numpy().tobytes()
        blob += struct.pack("<iiiiq", int(qtype), x.shape[0], w.shape[0], w.shape[1], len(raw))
        blob += x.contiguous().numpy().tobytes() + raw
    (tmp / "cases").write_bytes(bytes(blob))
    done = subprocess.run([QEMU, "-cpu", "max", str(driver), str(tmp / "cases"), str(tmp / "out"), str(isa)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    flat, out, at = torch.frombuffer(bytearray((tmp / "out").read_bytes()), dtype=torch.float32), [], 0
    for _, x, w in cases:
        out.append(flat[at:at + x.shape[0] * w.shape[0]].reshape(x.shape[0], w.shape[0]))
        at += x.shape[0] * w.shape[0]
    assert at == flat.numel()
    return out


@pytest.mark.parametrize("path", PATHS)
def test_aarch64_paths_match_the_reference(driver: Path, path: str, tmp_path: Path) -> None:
    cases = _cases()
    for (qtype, x, w), y in zip(cases, _run(driver, cases, PATHS[path], tmp_path)):
        ref = block_linear_ref(x, w)
        where = f"{qtype.name}, batch {x.shape[0]}"
        if qtype in FLOAT_TYPES:
            assert_rel_close(y, ref, FLOAT_RTOL)
            continue
        assert_rel_close(y, block_linear_ref(gguf_blocks_native.quantize_activations(x), w), FLOAT_RTOL)
        slack = FLOAT_RTOL * ref.abs().max()
        assert ((y - ref).abs() <= act_bound(x, dequantize(w)) * 1.0001 + slack).all(), f"{where}: beyond the int8 bound"


@pytest.mark.parametrize("cpu,best", [("max", "neon-dotprod"), ("cortex-a53", "neon")])
def test_the_run_time_choice_follows_the_cpu(driver: Path, cpu: str, best: str) -> None:
    done = subprocess.run([QEMU, "-cpu", cpu, str(driver), "--best-isa"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == PATHS[best]


@pytest.mark.parametrize("shared", [0, 40])  # 40: the cascade (a prefix every request shares)
def test_aarch64_float16_kv_store_and_attention_match_the_reference(driver: Path, shared: int, tmp_path: Path) -> None:
    """The 16-bit KV cache on aarch64 (SIMDe's NEON lowering of F16C's conversions): K/V stored into float16
    pools bit for bit as ``.to(torch.float16)``, and decode attention over them (contexts around the
    64-key chunks, head dim 24: P.V row by row) within float32 rounding of the reference."""
    from radixlm.kernels.attention_ref import decode_attention_ref

    gen = torch.Generator().manual_seed(shared)
    slots, kv_heads, dim, heads = 300, 2, 24, 8
    kv = torch.randn(slots, 2 * kv_heads * dim, generator=gen) * 3
    prefix = torch.randperm(slots, generator=gen)[:40]
    lens = [1, 64, 65, 130]
    pieces = [torch.cat([prefix, torch.randint(0, slots, (n,), generator=gen)]) if shared
              else torch.randint(0, slots, (n,), generator=gen) for n in lens]
    indptr = torch.tensor([0, *torch.tensor([len(p) for p in pieces]).cumsum(0).tolist()], dtype=torch.int64)
    indices, q = torch.cat(pieces).long(), torch.randn(len(lens), heads, dim, generator=gen)
    blob = struct.pack("<iiiiiq", slots, kv_heads, dim, len(lens), heads, shared) + kv.numpy().tobytes()
    blob += q.numpy().tobytes() + struct.pack("<f", dim ** -0.5) + indptr.numpy().tobytes() + indices.numpy().tobytes()
    (tmp_path / "case").write_bytes(blob)
    done = subprocess.run([QEMU, "-cpu", "max", str(driver), "--kv16", str(tmp_path / "case"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    raw = bytearray((tmp_path / "out").read_bytes())
    n = slots * kv_heads * dim
    k_pool = torch.frombuffer(raw[:2 * n], dtype=torch.float16).view(slots, kv_heads, dim)
    v_pool = torch.frombuffer(raw[2 * n:4 * n], dtype=torch.float16).view(slots, kv_heads, dim)
    out = torch.frombuffer(raw[4 * n:], dtype=torch.float32).view(len(lens), heads, dim)
    k_ref, v_ref = kv.view(slots, 2, kv_heads, dim).unbind(1)
    assert torch.equal(k_pool, k_ref.half()) and torch.equal(v_pool, v_ref.half())
    assert_rel_close(out, decode_attention_ref(q, k_ref.half(), v_ref.half(), indptr, indices, dim ** -0.5))
