"""Where Triton kernels run: compiled on CUDA, or on the CPU interpreter (``TRITON_INTERPRET=1``).

Triton fixes the mode when ``triton.language`` is first imported (its standard-library functions
are decorated then), so a process is either interpreted or compiled for good. This module never
imports triton at the top, so it can be consulted (and the mode chosen) before triton loads.
"""

from __future__ import annotations

import os
import sys

import torch

_TRUE = ("1", "true", "on", "yes")


def interpreter_enabled() -> bool:
    """True when ``TRITON_INTERPRET`` asks for the CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


def prepare_interpreter() -> bool:
    """Put this process in interpreter mode if still possible; True when kernels will run interpreted.

    Sets ``TRITON_INTERPRET=1`` (process-wide) when triton is not imported yet. Returns False when
    triton was already imported in compiled mode.
    """
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
        return True
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.zeros, InterpretedFunction) and interpreter_enabled()


def check_device(name: str, x: torch.Tensor) -> None:
    """Triton needs CUDA tensors, or CPU tensors with the interpreter on (ValueError otherwise)."""
    if x.device.type == "cuda" or (x.device.type == "cpu" and interpreter_enabled()):
        return
    raise ValueError(f"{name} is on {x.device}: the triton backend needs CUDA tensors "
                     "(or CPU tensors with TRITON_INTERPRET=1); use the 'torch' backend instead")


def dot_in_f32(dtype: torch.dtype) -> bool:
    """Whether kernels should upcast ``tl.dot`` operands to float32.

    The Triton 3.x CPU interpreter computes garbage for bfloat16 ``tl.dot``; bfloat16 products are
    exact in float32, so upcasting there gives what the GPU's bf16 MMA (float32 accumulate) gives.
    """
    return dtype == torch.bfloat16 and interpreter_enabled()
