"""Stand-in compiles for ``CompilePool(compile_fn="radixlm.constrained.testing.compile_hooks:NAME")``.

They run inside a compile worker process (no torch), so a test can make a compile slow or
memory-hungry on purpose (the real core compiles lazily: nothing real is slow enough to test with).
"""

from __future__ import annotations

import time
from typing import Any

from radixlm.constrained.compile.job import compile_parts
from radixlm.constrained.compile.job import prepare as prepare  # the worker's set-up, as the real module's
from radixlm.constrained.compile.worker import CompiledParts, CompileRequest


def allocate(vocab: Any, request: CompileRequest) -> CompiledParts:
    """Hold ``request.spec`` MiB for a moment, then compile the regex ``"a"``: a memory-hungry
    compile that fails with ``MemoryError`` under a smaller budget."""
    block = bytearray(int(request.spec) << 20)
    block[:: 1 << 12] = b"x" * len(block[:: 1 << 12])  # touch every page: really resident
    del block
    return compile_parts(vocab, CompileRequest("regex", "a"))


def spin(vocab: Any, request: CompileRequest) -> CompiledParts:
    """Burn CPU in Python for ``request.spec`` seconds, then compile the regex ``"a"``."""
    end = time.perf_counter() + float(request.spec)
    while time.perf_counter() < end:
        pass
    return compile_parts(vocab, CompileRequest("regex", "a"))


SLOW_PREFIX, ALLOC_PREFIX = "slow:", "alloc:"


def slow_marked(vocab: Any, request: CompileRequest) -> CompiledParts:
    """The real compile, except a regex ``"slow:S"`` (spins ``S`` seconds) or ``"alloc:M"``
    (holds ``M`` MiB), each then compiling the regex ``"a"``: a backend whose budgets tests can
    hit on demand."""
    spec = request.spec if request.kind == "regex" and isinstance(request.spec, str) else ""
    if spec.startswith(SLOW_PREFIX):
        return spin(vocab, CompileRequest("regex", spec[len(SLOW_PREFIX):]))
    if spec.startswith(ALLOC_PREFIX):
        return allocate(vocab, CompileRequest("regex", spec[len(ALLOC_PREFIX):]))
    return compile_parts(vocab, request)


_warm_calls = 0  # warm_up calls in this process


def warm_up() -> None:
    """The worker's one-time set-up hook (``compile.worker``): counted, and the real one run."""
    global _warm_calls
    from radixlm.constrained.compile.job import warm_up as real_warm_up

    real_warm_up()
    _warm_calls += 1


def report_warm(vocab: Any, request: CompileRequest) -> CompiledParts:
    """The regex ``"warm"`` if this process ran ``warm_up`` once before its first job, else
    ``"cold"``."""
    return compile_parts(vocab, CompileRequest("regex", "warm" if _warm_calls == 1 else "cold"))
