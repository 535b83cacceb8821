"""radixlm's native CPU decode kernels (``kernels/csrc/*.c``), built on first use, called through ctypes.

Why: at decode batch sizes (a few rows) MKL's sgemm reads the weights once per row, and every small
torch op between the matmuls costs 10-50 us of dispatch on a slow core. These kernels read every
weight row once for all rows of the batch, and ``decode_layer`` runs a whole decoder layer (norms,
q/k/v, RoPE + KV store, paged decode attention, o + residual, gate/up + SiLU, down + residual) in
one call. Threads: the library's own small pool (``csrc/pool.h``: brief spin, then a futex sleep),
``torch.get_num_threads()`` of them, the caller included.

The library is compiled once per source version with the platform's C compiler (``$CC``, else ``cc``;
``toolchain()``: x86-64 with ``-mavx2 -mfma -mf16c``; aarch64 Linux for Armv8-A, Apple Silicon with
``-mcpu=apple-m1`` into a ``.dylib``; other Linux CPUs portable C), one compiler process per source
file in parallel, then one link, into ``$RADIXLM_CACHE/native/`` (default ``~/.cache/radixlm``). The
kernels are written in x86 intrinsics; off x86 ``csrc/rl_simd.h`` takes them from SIMDe (the
``simde-py`` package's headers), which lowers them to NEON on aarch64. The compilers die with the
process that started them (even by ``kill -9``), and a build killed midway leaves only temp files the
next build removes. Nothing is required: without a compiler, on an x86 CPU without AVX2 and F16C, or
with ``RADIXLM_DISABLE_NATIVE=1``, ``available()`` is False and the callers keep their torch paths
(``torch_only()`` switches the kernels off for a block, for tests); a build that fails is logged as a
warning with its compiler's error and named in the start-up line (``describe()``), never silent.

Every function takes contiguous float32 CPU tensors (``usable`` checks them; int64 indices:
``usable_indices``), except the KV pools, which hold float32 or float16 (``usable_kv``, ``KV_DTYPES``):
a float16 pool is written rounded to nearest even (as ``.to(torch.float16)``) and widened to float32 as
attention loads it (F16C), all arithmetic in float32; the ``*_int8`` GEMVs take int8 weights with float32 per-row scales
(``usable_int8``), for ``--quantization int8`` (``runtime/model/quantization.py``).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

DISABLE_ENV = "RADIXLM_DISABLE_NATIVE"
ABI_VERSION = 9
CSRC = Path(__file__).parent / "csrc"
SOURCES = sorted(CSRC.glob("*.[ch]"))
COMMON_FLAGS = ("-O3", "-ffp-contract=off", "-pthread", "-fPIC")
KV_DTYPES = (torch.float32, torch.float16)  # the pools' dtypes the kernels read and write
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
                ("shared", _L), ("T", _I), ("nthreads", _I), ("kv_half", _I)]


_SIGNATURES = {
    "rl_linear": [_P, _I, _P, _P, _P, _P, _L, _L, _I],
    "rl_gate_up_silu": [_P, _I, _P, _P, _L, _L, _I],
    "rl_linear_i8": [_P, _I, _P, _P, _P, _P, _P, _L, _L, _I],
    "rl_gate_up_silu_i8": [_P, _I, _P, _P, _P, _L, _L, _I],
    "rl_rmsnorm_threads": [_P, _P, _P, _P, _L, _L, _F, _I],
    "rl_rope_store_kv_threads": [_P, _L, _L, _I, _I, _I, _P, _P, _P, _P, _P, _I, _I],
    "rl_decode_attention": [_P, _L, _P, _P, _P, _P, _I, _I, _I, _I, _L, _F, _P, _I, _I],
    "rl_cascade_attention": [_P, _L, _P, _P, _P, _L, _P, _P, _P, _I, _I, _I, _I, _F, _P, _I, _I],
    "rl_decode_layer": [ctypes.POINTER(LayerParams), ctypes.POINTER(StepArgs), _P, _P, _P],
}
_INT_SIGNATURES = {  # these return 0, or -1 (no memory)
    "rl_block_linear": [ctypes.POINTER(BlockProj), _P, _I, _P, _P, _P, _L, _I, _I],
    "rl_block_gate_up_silu": [ctypes.POINTER(BlockProj), _P, _I, _P, _L, _I, _I],
}
COMPILE_TIMEOUT_S = 120  # per compiler process (one source file, or the link)
_PR_SET_PDEATHSIG = 1
# the compiler's shell: on SIGTERM (its parent died) it kills its whole process group
_GROUP_GUARD = 'trap "kill -KILL 0" TERM; "$@" & wait $!'
# a build's temp files: .build-<pid>-<random>.so.part (the library) and .build-<pid>-<random>.objs/
BUILD_PREFIX, BUILD_SUFFIX, OBJECTS_SUFFIX = ".build-", ".so.part", ".objs"
_lib: ctypes.CDLL | None = None
_tried = False
_switched_off = False  # torch_only()
_unavailable: str | None = None  # why library() is None, for the start-up line


@dataclass(frozen=True)
class Toolchain:
    """How the library is built for one platform: a compiler, its flags and the library's file suffix."""

    compiler: str
    compile_flags: tuple[str, ...]  # for each source file (-c)
    link_flags: tuple[str, ...]     # for the library
    suffix: str                     # ".so" or ".dylib"


def toolchain(system: str = sys.platform, machine: str = platform.machine(),
              compiler: str | None = None) -> Toolchain | None:
    """The toolchain for ``system`` (``sys.platform``) on ``machine`` (``platform.machine()``), or None
    where the kernels are not built (not Linux or macOS). Off x86 the flags include SIMDe's headers
    (``csrc/rl_simd.h``); ``simde_include()`` raises ``RuntimeError`` when they are not installed."""
    x86 = machine in ("x86_64", "AMD64")
    if system == "darwin":
        cc, link, suffix = compiler or os.environ.get("CC", "clang"), ("-dynamiclib", "-lm"), ".dylib"
        isa = ("-mavx2", "-mfma", "-mf16c") if x86 else ("-mcpu=apple-m1", f"-I{simde_include()}")
    elif system.startswith("linux"):
        cc, link, suffix = compiler or os.environ.get("CC", "cc"), ("-shared", "-pthread", "-lm"), ".so"
        isa = (("-mavx2", "-mfma", "-mf16c") if x86 else ("-march=armv8-a",) if machine in ("aarch64", "arm64")
               else ()) + (() if x86 else (f"-I{simde_include()}",))
    else:
        return None
    return Toolchain(cc, COMMON_FLAGS + isa, link, suffix)


def simde_include() -> str:
    """The include path of SIMDe's headers (the ``simde-py`` package), which non-x86 builds need."""
    try:
        import simde_py
    except ImportError:
        raise RuntimeError("the native kernels need SIMDe's headers off x86: pip install simde-py") from None
    return simde_py.get_include()


def _cache_dir() -> Path:
    return Path(os.environ.get("RADIXLM_CACHE") or Path.home() / ".cache" / "radixlm") / "native"


def _unsupported_reason() -> str | None:
    """Why the library is not even built here, or None."""
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return f"switched off ({DISABLE_ENV}=1)"
    if not (sys.platform.startswith("linux") or sys.platform == "darwin"):
        return f"not built on {sys.platform}"
    if platform.machine() in ("x86_64", "AMD64") and not (
            torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") and _has_f16c()):
        return "this x86 CPU lacks AVX2 or F16C"
    return None


def _has_f16c() -> bool:
    """F16C (fp16 conversions; every AVX2 CPU has it), from /proc/cpuinfo's flags (macOS: assumed)."""
    if sys.platform == "darwin":
        return True
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " f16c" in line for line in f)
    except OSError:
        return False


def build(chain: Toolchain | None = None) -> Path:
    """Compile the library unless this source version is cached; returns its path. ``chain``: this
    machine's ``toolchain()`` unless given. Raises ``BuildError`` (the compiler's words) when it fails."""
    chain = chain or toolchain()
    if chain is None:
        raise BuildError(f"no toolchain for {sys.platform} {platform.machine()}")
    digest = hashlib.sha256(" ".join((chain.compiler, *chain.compile_flags, *chain.link_flags)).encode())
    for source in SOURCES:
        digest.update(source.name.encode() + source.read_bytes())
    path = _cache_dir() / f"cpu_kernels-{digest.hexdigest()[:16]}{chain.suffix}"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(path.parent)
    # another process may build at once: each writes its own temp files, named after its pid, and
    # renames the library into place (atomic); a build killed midway leaves temp files, never a library
    fd, tmp = tempfile.mkstemp(prefix=f"{BUILD_PREFIX}{os.getpid()}-", suffix=BUILD_SUFFIX, dir=path.parent)
    os.close(fd)
    objects = Path(tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}{os.getpid()}-", suffix=OBJECTS_SUFFIX, dir=path.parent))
    try:
        logger.info("building the native CPU kernels (once per version) into %s", path.parent)
        objs = compile_objects(chain, [s for s in SOURCES if s.suffix == ".c"], objects)
        with tqdm(total=1, desc="linking native CPU kernels", leave=False, disable=None) as bar:
            _compile([chain.compiler, *chain.link_flags, *map(str, objs), "-o", tmp], bar)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        shutil.rmtree(objects, ignore_errors=True)
    return path


class BuildError(RuntimeError):
    """The native build failed: the message names the step and quotes the compiler's first error."""


def compile_objects(chain: Toolchain, sources: list[Path], out_dir: Path, extra_flags: tuple[str, ...] = ()) -> list[Path]:
    """Compile each source to ``out_dir/<name>.o``, one compiler process per file, as many at once as
    there are CPUs, with a progress bar on a terminal. ``BuildError`` on the first file that fails."""
    objs = [out_dir / f"{src.stem}.o" for src in sources]
    with tqdm(total=len(sources), desc="building native CPU kernels (once)", leave=False, disable=None) as bar, \
            ThreadPoolExecutor(max_workers=min(len(sources), os.cpu_count() or 1)) as pool:
        futures = [pool.submit(_compile, [chain.compiler, *chain.compile_flags, *extra_flags, f"-I{CSRC}", "-c",
                                          str(src), "-o", str(obj)], bar) for src, obj in zip(sources, objs)]
        for src, future in zip(sources, futures):
            try:
                future.result()
            except subprocess.TimeoutExpired:
                raise BuildError(f"compiling {src.name} took over {COMPILE_TIMEOUT_S} s") from None
            except subprocess.CalledProcessError as e:
                raise BuildError(f"compiling {src.name}: {first_error(e.stderr)}") from None
    return objs


def first_error(stderr: bytes | None) -> str:
    """The compiler's first ``error`` line (else its last line): what a user needs to see."""
    lines = (stderr or b"").decode(errors="replace").strip().splitlines()
    errors = [line for line in lines if "error" in line.lower() or "not found" in line]
    return (errors or lines or ["no output"])[0].strip()[:300]


def _compile(cmd: list[str], bar: tqdm) -> None:
    """Run the compiler ``cmd``, then advance ``bar``, so that it never outlives this process: in its
    own process group, under a shell that kills the whole group (the driver's cc1, as and ld included)
    when this process dies, even by ``kill -9`` (Linux's parent-death signal), and killed whole on the
    timeout. ``CalledProcessError`` or ``TimeoutExpired`` as ``subprocess.run(check=True)`` raises them."""
    child = subprocess.Popen(["/bin/sh", "-c", _GROUP_GUARD, "sh", *cmd], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True,
                             preexec_fn=_term_with_parent if sys.platform.startswith("linux") else None)
    try:
        out, err = child.communicate(timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
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
    for tmp in [*directory.glob(f"{BUILD_PREFIX}*{BUILD_SUFFIX}"), *directory.glob(f"{BUILD_PREFIX}*{OBJECTS_SUFFIX}")]:
        pid = tmp.name[len(BUILD_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)
            removed.append(tmp)
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
    """The loaded library, building it on the first call; None where it cannot be used (see above):
    then ``unavailable_reason()`` says why, and a failed build is logged as a warning."""
    global _lib, _tried, _unavailable
    if not _tried:
        _tried = True
        _unavailable = _unsupported_reason()
        if _unavailable is None:
            try:
                _lib = _load()
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                _unavailable = f"the build failed: {e}"
                logger.warning("native CPU kernels unavailable, running torch ops instead: %s", _unavailable)
    return _lib


def unavailable_reason() -> str | None:
    """Why the native kernels do not run here (after ``library()``), or None when they do."""
    library()
    return _unavailable


def describe() -> str:
    """The kernels in use, for the start-up line: ``native CPU kernels avx2``, ``... neon-dotprod``,
    or ``torch ops (native CPU kernels: the build failed: compiling x.c: error: ...)``."""
    if library() is None:
        return f"torch ops (native CPU kernels: {_unavailable})"
    from radixlm.kernels import gguf_blocks_native  # it imports this module

    return f"native CPU kernels {gguf_blocks_native.path_name()}"


def available() -> bool:
    """Whether the native kernels can run here (builds them on the first call)."""
    return library() is not None and not _switched_off


def usable(*tensors: torch.Tensor) -> bool:
    """The kernels are loaded (``available()`` was called) and every tensor is float32, CPU, contiguous."""
    if _lib is None or _switched_off:
        return False
    return all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def usable_kv(k_pool: torch.Tensor, v_pool: torch.Tensor) -> bool:
    """KV pools the kernels take: loaded kernels, both CPU, contiguous, of one dtype in ``KV_DTYPES``."""
    if _lib is None or _switched_off:
        return False
    return (k_pool.dtype == v_pool.dtype and k_pool.dtype in KV_DTYPES
            and all(t.device.type == "cpu" and t.is_contiguous() for t in (k_pool, v_pool)))


def _half(pool: torch.Tensor) -> int:
    return int(pool.dtype == torch.float16)


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
    store k and v at pool rows ``loc`` (int64 ``[T]``) of ``k_pool``/``v_pool`` ``[slots, Hkv, D]`` (float32, or
    float16: rounded to nearest even)."""
    (_lib or library()).rl_rope_store_kv_threads(qkv.data_ptr(), qkv.shape[1], qkv.shape[0], num_heads,
                                                 num_kv_heads, head_dim, cos.data_ptr(), sin.data_ptr(),
                                                 loc.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(),
                                                 torch.get_num_threads(), _half(k_pool))


def decode_attention_ok(num_heads: int, num_kv_heads: int, head_dim: int) -> bool:
    """Whether ``decode_attention`` (and ``decode_layer``) take these head shapes."""
    group = num_heads // num_kv_heads
    return head_dim % 8 == 0 and head_dim <= ATTN_MAX_HEAD_DIM and group <= ATTN_MAX_GROUP


def decode_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, kv_indptr: torch.Tensor,
                     kv_indices: torch.Tensor, sm_scale: float, shared_prefix_len: int = 0) -> torch.Tensor:
    """One query per request over its paged context -> ``[bs, H, D]``; q ``[bs, H, D]`` whose rows may be
    strided (a view into the fused qkv rows), its heads contiguous; indptr/indices int64.
    ``shared_prefix_len``: leading slots every request shares, read once for the batch (cascade). The
    pools: float32 or float16 (``usable_kv``)."""
    bs, heads, dim = q.shape
    out = torch.empty(bs, heads, dim, dtype=torch.float32)
    (_lib or library()).rl_decode_attention(q.data_ptr(), q.stride(0), k_pool.data_ptr(), v_pool.data_ptr(),
                                            kv_indptr.data_ptr(), kv_indices.data_ptr(), bs, heads, k_pool.shape[1],
                                            dim, shared_prefix_len, sm_scale, out.data_ptr(),
                                            torch.get_num_threads(), _half(k_pool))
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
                                             dim, sm_scale, out.data_ptr(), torch.get_num_threads(), _half(k_pool))
    return out


def decode_step(cos: torch.Tensor, sin: torch.Tensor, loc: torch.Tensor, kv_indptr: torch.Tensor,
                kv_indices: torch.Tensor, shared_prefix_len: int, times: ctypes.Array | None = None,
                kv_dtype: torch.dtype = torch.float32) -> StepArgs:
    """The batch of one decode step for ``decode_layer``: cos/sin ``[bs, 1, D]``, KV slots ``loc [bs]``,
    contexts ``kv_indptr``/``kv_indices`` (int64); the tensors must outlive the step. ``times``: a
    ``c_double * len(LAYER_PHASES)`` that accumulates the seconds of each layer phase (profiling).
    ``kv_dtype``: the pools' dtype (``KV_DTYPES``)."""
    return StepArgs(cos.data_ptr(), sin.data_ptr(), loc.data_ptr(), kv_indptr.data_ptr(), kv_indices.data_ptr(),
                    ctypes.addressof(times) if times is not None else None, shared_prefix_len, loc.shape[0],
                    torch.get_num_threads(), int(kv_dtype == torch.float16))


def decode_layer(params: LayerParams, step: StepArgs, hidden: torch.Tensor, k_pool: torch.Tensor,
                 v_pool: torch.Tensor) -> torch.Tensor:
    """One decoder layer over a decode batch, ``hidden [bs, hidden]`` updated in place and returned.

    ``params`` holds pointers into the layer's tensors (they must outlive it); the pools are the
    layer's ``[slots, Hkv, D]`` buffers, of the dtype ``step`` was made for.
    """
    (_lib or library()).rl_decode_layer(params, step, hidden.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr())
    return hidden
