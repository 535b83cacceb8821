"""radixlm's native CPU decode kernels (``kernels/csrc/*.c``), built on first use, called through ctypes.

Why: at decode batch sizes (a few rows) MKL's sgemm reads the weights once per row, and every small
torch op between the matmuls costs 10-50 us of dispatch on a slow core. These kernels read every
weight row once for all rows of the batch, and ``decode_layer`` runs a whole decoder layer (norms,
q/k/v, RoPE + KV store, paged decode attention, o + residual, gate/up + SiLU, down + residual) in
one call. Threads: the library's own small pool (``csrc/pool.h``: brief spin, then a futex sleep),
``torch.get_num_threads()`` of them, the caller included.

The library is compiled once per source version with the system C compiler (``$CC``, else ``cc``:
``-O3 -mavx2 -mfma -mf16c -ffp-contract=off -pthread``) into ``$RADIXLM_CACHE/native/`` (default
``~/.cache/radixlm``); the compiler and its children die with the process that started them (even
by ``kill -9``), and a build killed midway leaves only a temp file the next build removes. Nothing is required: on a machine without AVX2 and F16C, without a compiler, off
Linux x86-64, or with ``RADIXLM_DISABLE_NATIVE=1``, ``available()`` is False and the callers keep
their torch paths (``torch_only()`` switches the kernels off for a block, for tests).

Every function takes contiguous float32 CPU tensors (``usable`` checks them; int64 indices:
``usable_indices``); the ``*_int8`` GEMVs take int8 weights with float32 per-row scales
(``usable_int8``), for ``--quantization int8`` (``runtime/model/quantization.py``).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm import tqdm

DISABLE_ENV = "RADIXLM_DISABLE_NATIVE"
ABI_VERSION = 8
SOURCES = sorted((Path(__file__).parent / "csrc").glob("*.[ch]"))
FLAGS = ("-O3", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off", "-pthread", "-fPIC", "-shared")
ATTN_MAX_GROUP, ATTN_MAX_HEAD_DIM = 16, 256  # limits of rl_decode_attention (csrc/attention.c)
# the phases of rl_decode_layer that decode_layer(times=...) accumulates (csrc/layer.c, enum rl_phase)
LAYER_PHASES = ("norms", "qkv matmul", "rotary + kv store", "attention", "o matmul", "gate_up matmul + SiLU",
                "down matmul")

logger = logging.getLogger("radixlm.kernels")
_P, _I, _L, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float


BLOCK_PARTS = 3  # RL_BLOCK_PARTS (csrc/kernels.h)


class BlockProj(ctypes.Structure):
    """``rl_block_proj`` (csrc/kernels.h): a projection as up to ``BLOCK_PARTS`` row-wise GGUF block weights
    (raw bytes, ``gguf_blocks.h`` type, rows); ``parts = 0``: not block weights."""

    _fields_ = [("w", _P * BLOCK_PARTS), ("qtype", _I * BLOCK_PARTS), ("rows", _L * BLOCK_PARTS), ("parts", _I)]


class LayerParams(ctypes.Structure):
    """``rl_layer`` (csrc/layer.c): one decoder layer's parameter pointers and shapes; ``blocks``: the
    qkv, o, gate_up and down projections where they are GGUF block weights (``isa``: their kernels')."""

    _fields_ = [(name, _P) for name in ("ln1", "ln2", "w_qkv", "b_qkv", "w_o", "b_o", "w_gate_up", "w_down",
                                        "b_down", "q_norm", "k_norm", "s_qkv", "s_o", "s_gate_up", "s_down")] + [
        ("eps", _F), ("scale", _F), ("hidden", _I), ("H", _I), ("Hkv", _I), ("D", _I), ("inter", _I),
        ("isa", _I), ("blocks", BlockProj * 4)]


class StepArgs(ctypes.Structure):
    """``rl_step`` (csrc/layer.c): one decode step's batch pointers, shared by every layer."""

    _fields_ = [("cos", _P), ("sin", _P), ("loc", _P), ("kv_indptr", _P), ("kv_indices", _P), ("times", _P),
                ("shared", _L), ("T", _I), ("nthreads", _I)]


_SIGNATURES = {
    "rl_linear": [_P, _I, _P, _P, _P, _P, _L, _L, _I],
    "rl_gate_up_silu": [_P, _I, _P, _P, _L, _L, _I],
    "rl_linear_i8": [_P, _I, _P, _P, _P, _P, _P, _L, _L, _I],
    "rl_gate_up_silu_i8": [_P, _I, _P, _P, _P, _L, _L, _I],
    "rl_rmsnorm_threads": [_P, _P, _P, _P, _L, _L, _F, _I],
    "rl_rope_store_kv_threads": [_P, _L, _L, _I, _I, _I, _P, _P, _P, _P, _P, _I],
    "rl_decode_attention": [_P, _L, _P, _P, _P, _P, _I, _I, _I, _I, _L, _F, _P, _I],
    "rl_cascade_attention": [_P, _L, _P, _P, _P, _L, _P, _P, _P, _I, _I, _I, _I, _F, _P, _I],
    "rl_decode_layer": [ctypes.POINTER(LayerParams), ctypes.POINTER(StepArgs), _P, _P, _P],
}
_INT_SIGNATURES = {  # these return 0, or -1 (no memory)
    "rl_block_linear": [ctypes.POINTER(BlockProj), _P, _I, _P, _P, _P, _L, _I, _I],
    "rl_block_gate_up_silu": [ctypes.POINTER(BlockProj), _P, _I, _P, _L, _I, _I],
}
COMPILE_TIMEOUT_S = 120
_PR_SET_PDEATHSIG = 1
# the compiler's shell: on SIGTERM (its parent died) it kills its whole process group
_GROUP_GUARD = 'trap "kill -KILL 0" TERM; "$@" & wait $!'
BUILD_PREFIX, BUILD_SUFFIX = ".build-", ".so.part"  # a build's temp file: .build-<pid>-<random>.so.part
_lib: ctypes.CDLL | None = None
_tried = False
_switched_off = False  # torch_only()


def _cache_dir() -> Path:
    return Path(os.environ.get("RADIXLM_CACHE") or Path.home() / ".cache" / "radixlm") / "native"


def _supported_machine() -> bool:
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return False
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return False
    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") and _has_f16c()


def _has_f16c() -> bool:
    """F16C (fp16 conversions; every AVX2 CPU has it), from /proc/cpuinfo's flags."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " f16c" in line for line in f)
    except OSError:
        return False


def build() -> Path:
    """Compile the library unless this source version is cached; returns its path."""
    compiler = os.environ.get("CC", "cc")
    digest = hashlib.sha256(" ".join((compiler, *FLAGS)).encode())
    for source in SOURCES:
        digest.update(source.name.encode() + source.read_bytes())
    path = _cache_dir() / f"cpu_kernels-{digest.hexdigest()[:16]}.so"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(path.parent)
    # another process may build at once: each writes its own temp file, named after its pid, and
    # renames it into place (atomic); a build killed midway leaves a temp file, never a .so
    fd, tmp = tempfile.mkstemp(prefix=f"{BUILD_PREFIX}{os.getpid()}-", suffix=BUILD_SUFFIX, dir=path.parent)
    os.close(fd)
    try:
        sources = [str(s) for s in SOURCES if s.suffix == ".c"]
        logger.info("building the native CPU kernels (once per version) into %s", path.parent)
        with tqdm(total=1, desc="building native CPU kernels (once)", leave=False, disable=None,
                  bar_format="{desc}: {elapsed}") as bar:  # None: drawn on a terminal only
            _compile([compiler, *FLAGS, *sources, "-o", tmp, "-lm"], bar)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _compile(cmd: list[str], bar: tqdm, refresh_s: float = 0.5) -> None:
    """Run the compiler ``cmd``, redrawing ``bar``'s elapsed time while it works, so that it never
    outlives this process: in its own process group, under a shell that kills the whole group (the
    driver's cc1, as and ld included) when this process dies, even by ``kill -9`` (the kernel's
    parent-death signal), and killed whole on the timeout. ``CalledProcessError`` or
    ``TimeoutExpired`` as ``subprocess.run(check=True)`` raises them."""
    child = subprocess.Popen(["/bin/sh", "-c", _GROUP_GUARD, "sh", *cmd], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_term_with_parent)
    deadline = time.monotonic() + COMPILE_TIMEOUT_S
    try:
        while True:
            try:
                out, err = child.communicate(timeout=refresh_s)
                break
            except subprocess.TimeoutExpired:
                bar.refresh()
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(cmd, COMPILE_TIMEOUT_S) from None
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, cmd, out, err)
    bar.update()


def _term_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux ``PR_SET_PDEATHSIG``)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def remove_stale_builds(directory: Path) -> list[Path]:
    """Delete the temp files of builds whose process is gone (killed midway); returns them."""
    removed = []
    for tmp in directory.glob(f"{BUILD_PREFIX}*{BUILD_SUFFIX}"):
        pid = tmp.name[len(BUILD_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                tmp.unlink()
                removed.append(tmp)
            except FileNotFoundError:
                pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build()))
    if lib.rl_abi_version() != ABI_VERSION:
        raise RuntimeError(f"native kernels report ABI {lib.rl_abi_version()}, expected {ABI_VERSION}")
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, None
    for name, argtypes in _INT_SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, _I
    return lib


def library() -> ctypes.CDLL | None:
    """The loaded library, building it on the first call; None where it cannot be used (see above)."""
    global _lib, _tried
    if not _tried:
        _tried = True
        if _supported_machine():
            try:
                _lib = _load()
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                detail = getattr(e, "stderr", b"") or b""
                logger.warning("native CPU kernels unavailable, using torch ops: %s %s", e,
                               detail.decode(errors="replace")[-500:])
    return _lib


def available() -> bool:
    """Whether the native kernels can run here (builds them on the first call)."""
    return library() is not None and not _switched_off


def usable(*tensors: torch.Tensor) -> bool:
    """The kernels are loaded (``available()`` was called) and every tensor is float32, CPU, contiguous."""
    if _lib is None or _switched_off:
        return False
    return all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def usable_indices(*tensors: torch.Tensor) -> bool:
    """Index tensors the kernels take: int64, on the CPU, contiguous."""
    return all(t.dtype == torch.int64 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def usable_int8(weight: torch.Tensor, scale: torch.Tensor) -> bool:
    """An int8 ``[N, K]`` weight and its float32 ``[N]`` scales the int8 kernels take (contiguous, CPU)."""
    return (weight.dtype == torch.int8 and weight.device.type == "cpu" and weight.is_contiguous()
            and usable(scale) and scale.shape == weight.shape[:1])


@contextmanager
def torch_only() -> Iterator[None]:
    """Within the block, ``available()``/``usable()`` are False: callers take their torch paths (tests)."""
    global _switched_off
    before, _switched_off = _switched_off, True
    try:
        yield
    finally:
        _switched_off = before


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           add: torch.Tensor | None = None) -> torch.Tensor:
    """``x [M, K] @ weight[N, K].T (+ bias[N]) (+ add[M, N])`` -> new ``[M, N]``; meant for small M."""
    m, (n, k) = x.shape[0], weight.shape
    y = torch.empty(m, n, dtype=torch.float32)
    (_lib or library()).rl_linear(x.data_ptr(), m, weight.data_ptr(), _ptr(bias), _ptr(add), y.data_ptr(), n, k,
                                  torch.get_num_threads())
    return y


def block_linear(blocks: BlockProj, x: torch.Tensor, isa: int, bias: torch.Tensor | None = None,
                 add: torch.Tensor | None = None) -> torch.Tensor:
    """``add[M, N] + (x [M, K] @ W.T + bias[N])`` -> new ``[M, N]`` for GGUF block weights ``blocks`` (their
    parts' outputs written side by side; ``isa``: ``gguf_blocks_native.ISAS``'s). ``MemoryError`` when the
    kernels cannot allocate their buffers."""
    n = sum(blocks.rows[i] for i in range(blocks.parts))
    y = torch.empty(x.shape[0], n, dtype=torch.float32)
    if (_lib or library()).rl_block_linear(ctypes.byref(blocks), x.data_ptr(), x.shape[0], _ptr(bias), _ptr(add),
                                           y.data_ptr(), x.shape[1], isa, torch.get_num_threads()) != 0:
        raise MemoryError(f"the native block matmul could not allocate its buffers for x {tuple(x.shape)}")
    return y


def block_gate_up_silu(blocks: BlockProj, x: torch.Tensor, isa: int) -> torch.Tensor:
    """``silu(x @ W[:I].T) * (x @ W[I:].T)`` -> new ``[M, I]`` for a fused gate/up ``[2I, K]`` in GGUF block
    weights ``blocks``; ``MemoryError`` as ``block_linear``."""
    two_i = sum(blocks.rows[i] for i in range(blocks.parts))
    out = torch.empty(x.shape[0], two_i // 2, dtype=torch.float32)
    if (_lib or library()).rl_block_gate_up_silu(ctypes.byref(blocks), x.data_ptr(), x.shape[0], out.data_ptr(),
                                                 x.shape[1], isa, torch.get_num_threads()) != 0:
        raise MemoryError(f"the native block matmul could not allocate its buffers for x {tuple(x.shape)}")
    return out


def gate_up_silu(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``silu(x @ weight[:I].T) * (x @ weight[I:].T)`` -> ``[M, I]`` for the fused gate/up ``[2I, K]``."""
    m, (two_i, k) = x.shape[0], weight.shape
    out = torch.empty(m, two_i // 2, dtype=torch.float32)
    (_lib or library()).rl_gate_up_silu(x.data_ptr(), m, weight.data_ptr(), out.data_ptr(), two_i // 2, k,
                                        torch.get_num_threads())
    return out


def linear_int8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None,
                add: torch.Tensor | None = None) -> torch.Tensor:
    """``(x [M, K] @ weight[N, K].T) * scale[N] (+ bias[N]) (+ add[M, N])`` -> new ``[M, N]``, int8 weight."""
    m, (n, k) = x.shape[0], weight.shape
    y = torch.empty(m, n, dtype=torch.float32)
    (_lib or library()).rl_linear_i8(x.data_ptr(), m, weight.data_ptr(), scale.data_ptr(), _ptr(bias), _ptr(add),
                                     y.data_ptr(), n, k, torch.get_num_threads())
    return y


def gate_up_silu_int8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``gate_up_silu`` for an int8 fused gate/up ``[2I, K]`` with its float32 scales ``[2I]``."""
    m, (two_i, k) = x.shape[0], weight.shape
    out = torch.empty(m, two_i // 2, dtype=torch.float32)
    (_lib or library()).rl_gate_up_silu_i8(x.data_ptr(), m, weight.data_ptr(), scale.data_ptr(), out.data_ptr(),
                                           two_i // 2, k, torch.get_num_threads())
    return out


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float, add: torch.Tensor | None = None) -> torch.Tensor:
    """RMSNorm of the rows of ``x [..., dim]`` -> new tensor; with ``add``, first ``x += add`` in place."""
    y = torch.empty_like(x)
    dim = x.shape[-1]
    (_lib or library()).rl_rmsnorm_threads(x.data_ptr(), _ptr(add), weight.data_ptr(), y.data_ptr(),
                                           x.numel() // dim, dim, eps, torch.get_num_threads())
    return y


def rope_store_kv(qkv: torch.Tensor, num_heads: int, num_kv_heads: int, head_dim: int, cos: torch.Tensor,
                  sin: torch.Tensor, loc: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> None:
    """On the fused rows ``qkv [T, (H + 2 Hkv) * D]``: rotate q and k in place (cos/sin ``[T, D]``), then
    store k and v at pool rows ``loc`` (int64 ``[T]``) of ``k_pool``/``v_pool`` ``[slots, Hkv, D]``."""
    (_lib or library()).rl_rope_store_kv_threads(qkv.data_ptr(), qkv.shape[1], qkv.shape[0], num_heads,
                                                 num_kv_heads, head_dim, cos.data_ptr(), sin.data_ptr(),
                                                 loc.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(),
                                                 torch.get_num_threads())


def decode_attention_ok(num_heads: int, num_kv_heads: int, head_dim: int) -> bool:
    """Whether ``decode_attention`` (and ``decode_layer``) take these head shapes."""
    group = num_heads // num_kv_heads
    return head_dim % 8 == 0 and head_dim <= ATTN_MAX_HEAD_DIM and group <= ATTN_MAX_GROUP


def decode_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, kv_indptr: torch.Tensor,
                     kv_indices: torch.Tensor, sm_scale: float, shared_prefix_len: int = 0) -> torch.Tensor:
    """One query per request over its paged context -> ``[bs, H, D]``; q ``[bs, H, D]`` whose rows may be
    strided (a view into the fused qkv rows), its heads contiguous; indptr/indices int64.
    ``shared_prefix_len``: leading slots every request shares, read once for the batch (cascade)."""
    bs, heads, dim = q.shape
    out = torch.empty(bs, heads, dim, dtype=torch.float32)
    (_lib or library()).rl_decode_attention(q.data_ptr(), q.stride(0), k_pool.data_ptr(), v_pool.data_ptr(),
                                            kv_indptr.data_ptr(), kv_indices.data_ptr(), bs, heads, k_pool.shape[1],
                                            dim, shared_prefix_len, sm_scale, out.data_ptr(),
                                            torch.get_num_threads())
    return out


def cascade_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, prefix_slots: torch.Tensor,
                      starts: torch.Tensor, ends: torch.Tensor, kv_indices: torch.Tensor,
                      sm_scale: float) -> torch.Tensor:
    """Cascade attention of query rows q ``[T, H, D]`` (rows may be strided, heads contiguous) ->
    float32 ``[T, H, D]``: every row attends to the pool slots ``prefix_slots [P]`` (P >= 1, read once
    per KV head for all rows), then to its own keys ``kv_indices[starts[t]:ends[t]]`` (an extend's
    causal suffix), one softmax over both. Indices int64."""
    rows, heads, dim = q.shape
    out = torch.empty(rows, heads, dim, dtype=torch.float32)
    (_lib or library()).rl_cascade_attention(q.data_ptr(), q.stride(0), k_pool.data_ptr(), v_pool.data_ptr(),
                                             prefix_slots.data_ptr(), prefix_slots.shape[0], starts.data_ptr(),
                                             ends.data_ptr(), kv_indices.data_ptr(), rows, heads, k_pool.shape[1],
                                             dim, sm_scale, out.data_ptr(), torch.get_num_threads())
    return out


def decode_step(cos: torch.Tensor, sin: torch.Tensor, loc: torch.Tensor, kv_indptr: torch.Tensor,
                kv_indices: torch.Tensor, shared_prefix_len: int, times: ctypes.Array | None = None) -> StepArgs:
    """The batch of one decode step for ``decode_layer``: cos/sin ``[bs, 1, D]``, KV slots ``loc [bs]``,
    contexts ``kv_indptr``/``kv_indices`` (int64); the tensors must outlive the step. ``times``: a
    ``c_double * len(LAYER_PHASES)`` that accumulates the seconds of each layer phase (profiling)."""
    return StepArgs(cos.data_ptr(), sin.data_ptr(), loc.data_ptr(), kv_indptr.data_ptr(), kv_indices.data_ptr(),
                    ctypes.addressof(times) if times is not None else None, shared_prefix_len, loc.shape[0],
                    torch.get_num_threads())


def decode_layer(params: LayerParams, step: StepArgs, hidden: torch.Tensor, k_pool: torch.Tensor,
                 v_pool: torch.Tensor) -> torch.Tensor:
    """One decoder layer over a decode batch, ``hidden [bs, hidden]`` updated in place and returned.

    ``params`` holds pointers into the layer's tensors (they must outlive it); the pools are the
    layer's ``[slots, Hkv, D]`` float32 buffers.
    """
    (_lib or library()).rl_decode_layer(params, step, hidden.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr())
    return hidden
