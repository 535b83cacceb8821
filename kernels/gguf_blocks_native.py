"""The native GGUF block matmul (``csrc/gguf_matmul.c``, ``gguf_tiles.c``, ``gguf_unpack.c``), through ctypes.

Built into the same library as the other native CPU kernels (``cpu_native``: Linux or macOS, a C
compiler, not ``RADIXLM_DISABLE_NATIVE=1``). The instruction set is chosen at run time among this
machine's ``machine_isas()``: on x86-64 AVX-512 (F, BW, VL, VNNI) where the CPU has it, else AVX2; on
aarch64 ``neon-dotprod`` (SDOT tiles, ``csrc/gguf_tiles.c``) where the CPU has the dot product, else
``neon`` (the AVX2 code lowered to NEON, ``csrc/rl_simd.h``); elsewhere ``scalar`` (portable C, named
``portable`` in the start-up line). ``RADIXLM_GGUF_ISA`` or ``forced_isa(...)`` picks one (tests,
benchmarks); asking for one this CPU lacks raises ``RuntimeError``.

Numerics: the quantized types quantize each activation row to int8 blocks of 32 (``q = round(x /
dx)``, ``dx = max|x| / 127`` per block, ggml's Q8_0) and sum the products exactly in int32, so a
result equals ``quantize_activations(x) @ W.T`` to float32 rounding; against ``x @ W.T`` each
activation carries a rounding error of at most ``dx / 2`` (``max|x| / 254`` of its block). The float
types (F32, F16, BF16) multiply float32 activations.

Paths: at 1-2 rows the block types are decoded in registers block by block (``csrc/gguf_decode.c``
for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; ``gguf_decode_k.c`` for Q4_K, Q5_K, Q6_K; with software prefetch:
memory-bound); everything else (more rows, the float types, the scalar path) unpacks a few
weight rows at a time into a thread's scratch and runs register tiles over all activation rows
(``csrc/gguf_tiles.c``), so a prefill unpacks each weight row once.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from radixlm.kernels import cpu_native

if TYPE_CHECKING:  # gguf_blocks imports this module
    from radixlm.kernels.gguf_blocks import BlockWeight

ISA_ENV = "RADIXLM_GGUF_ISA"
ISAS = {"scalar": 0, "avx2": 1, "avx512": 2, "neon": 1, "neon-dotprod": 3}  # names -> csrc's GB_ISA_*
_P, _I, _L = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
_SIGNATURES = {
    "rl_gguf_linear": ([_P, _I, _P, _I, _P, _P, _L, _L, _I, _I], _I),
    "rl_gguf_unpack_row": ([_P, _I, _L, _P, _P, _P, _I], _I),
    "rl_gguf_best_isa": ([], _I),
}
_forced: str | None = None
_bound = False


def _lib() -> ctypes.CDLL | None:
    global _bound
    lib = cpu_native.library()
    if lib is not None and not _bound:
        for name, (argtypes, restype) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, restype
        _bound = True
    return lib


def available() -> bool:
    """Whether the native block kernels run here (builds the native library on the first call)."""
    return _lib() is not None and cpu_native.available()


def machine_isas() -> list[str]:
    """The instruction sets this machine's build has, slowest first (``best_isa`` and those below it)."""
    machine = platform.machine()
    if machine in ("x86_64", "AMD64"):
        names = ["scalar", "avx2", "avx512"]
    elif machine in ("aarch64", "arm64"):
        names = ["scalar", "neon", "neon-dotprod"]
    else:
        names = ["scalar"]
    return names[:names.index(best_isa()) + 1]


def best_isa() -> str:
    """The fastest instruction set this CPU runs: ``avx512``, ``avx2``, ``neon-dotprod``, ``neon`` or ``scalar``."""
    lib = _lib()
    if lib is None:
        raise RuntimeError("the native CPU kernels are unavailable here")
    best = lib.rl_gguf_best_isa()
    if best == ISAS["avx2"]:
        return "avx2" if platform.machine() in ("x86_64", "AMD64") else "neon"
    return next(name for name, value in ISAS.items() if value == best)


def path_name() -> str:
    """The start-up line's name of the path ``linear`` runs: ``isa()``, with ``scalar`` as ``portable``."""
    name = isa()
    return "portable" if name == "scalar" else name


def isa() -> str:
    """The instruction set ``linear`` uses now: ``forced_isa``, else ``$RADIXLM_GGUF_ISA``, else ``best_isa()``."""
    name = _forced or os.environ.get(ISA_ENV, "") or best_isa()
    if name not in ISAS:
        raise ValueError(f"{ISA_ENV} must be one of {sorted(ISAS)}, got {name!r}")
    if name not in machine_isas():
        raise RuntimeError(f"the {name} path is not available on this CPU (it runs {', '.join(machine_isas())})")
    return name


@contextmanager
def forced_isa(name: str) -> Iterator[None]:
    """Within the block, ``linear`` runs the ``name`` path (one of ``ISAS``; ``isa()`` checks the CPU has it)."""
    global _forced
    if name not in ISAS:
        raise ValueError(f"isa must be one of {sorted(ISAS)}, got {name!r}")
    before, _forced = _forced, name
    try:
        yield
    finally:
        _forced = before


def linear(x: torch.Tensor, w: BlockWeight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x [M, in] (float32, contiguous) @ W.T (+ bias [out], float32)`` -> float32 ``[M, out]``."""
    m, (n, k) = x.shape[0], w.shape
    y = torch.empty(m, n, dtype=torch.float32)
    if m == 0:
        return y
    rc = _lib().rl_gguf_linear(x.data_ptr(), m, w.data.data_ptr(), w.qtype,
                               None if bias is None else bias.data_ptr(), y.data_ptr(), n, k, ISAS[isa()],
                               torch.get_num_threads())
    if rc != 0:
        raise MemoryError(f"the native block matmul could not allocate its buffers for x {tuple(x.shape)}")
    return y


def unpack_row(w: BlockWeight, row: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row ``row`` of a quantized weight as the kernels see it: ``(u uint8 [in], ws [in/16], c [in/16])``
    with ``weight[k] = ws[k // 16] * u[k] + c[k // 16]``, by the current ``isa()``'s unpacking (tests)."""
    k = w.shape[1]
    u, ws, c = torch.empty(k, dtype=torch.uint8), torch.empty(k // 16), torch.empty(k // 16)
    raw = w.data[row].contiguous()
    if _lib().rl_gguf_unpack_row(raw.data_ptr(), w.qtype, k, u.data_ptr(), ws.data_ptr(), c.data_ptr(),
                                  ISAS[isa()]) != 0:
        raise ValueError(f"{w.type_name} is not a quantized block type")
    return u, ws, c


def quantize_activations(x: torch.Tensor) -> torch.Tensor:
    """``x [M, K]`` (K a multiple of 32) as the kernels see it: ``round(x / dx) * dx`` per block of 32."""
    blocks = x.float().reshape(x.shape[0], -1, 32)
    d = blocks.abs().amax(-1, keepdim=True) / 127.0
    inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
    return (torch.round(blocks * inv) * d).reshape(x.shape)
