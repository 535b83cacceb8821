"""The compile worker process: ``python -m radixlm.constrained.compile.worker FD PARENT_PID MAX_MB``.

``CompilePool`` starts it with one end of a socket pair as ``FD``. Protocol (pickles over a
``multiprocessing.connection.Connection``): the parent sends ``(vocab, compile_fn)`` once, the
compile module's ``prepare(vocab)`` may replace the vocabulary by what its jobs read, the worker
caps its address space at what it holds then plus ``MAX_MB`` MiB (``RLIMIT_AS``) and answers
``("ready", pid)``; then per job the parent sends a ``CompileRequest`` and the worker
answers ``(outcome, value)``: ``("ok", CompiledParts)``, ``("error", ConstraintError)`` or
``("memory", None)`` (a ``MemoryError``: the parent retires this worker). A native allocation
that fails under the cap aborts the process instead (SIGABRT), which the parent reads the same
way. The worker never exits on its own while the parent lives, and dies with it.

A subprocess rather than ``multiprocessing``'s spawn/forkserver: those re-import the parent's
``__main__`` in the child (a script without a ``__main__`` guard would start a second engine),
and a fork of the engine (threads, CUDA) is unsafe.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from radixlm.constrained.checks.paths import UniquePaths
from radixlm.constrained.errors import ConstraintError

PR_SET_PDEATHSIG = 1

logger = logging.getLogger("radixlm.grammar")
DEFAULT_COMPILE_FN = "radixlm.constrained.compile.job:compile_parts"


# How a JSON schema's object members are generated (``SamplingParams.json_key_order``): "schema":
# declared properties in the order of ``properties``, extras only where the schema declares them;
# "any": any order, and extras wherever JSON Schema allows them.
KEY_ORDERS = ("schema", "any")


@dataclass(frozen=True)
class CompileRequest:
    """What to compile (picklable: it travels to a worker process)."""

    kind: str
    spec: Any
    whitespace_pattern: str | None = None
    strict: bool = True
    key_order: str = "schema"  # one of KEY_ORDERS (json_schema only)

    def cache_key(self) -> str:
        """Equal for constraints that compile to the same grammar."""
        order = self.key_order if self.kind == "json_schema" else None
        return json.dumps([self.kind, self.spec, self.whitespace_pattern, self.strict, order],
                          sort_keys=True, ensure_ascii=False)


@dataclass
class CompiledParts:
    """A compile's result: the Lark grammar and what was relaxed/restricted to get it;
    ``unique``: where the matcher checks ``uniqueItems`` and object members at runtime (None:
    nowhere); ``matcher_bytes``: the memory the matcher probe added in the worker."""

    lark: str
    relaxed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unique: UniquePaths | None = None
    matcher_bytes: int | None = None  # what the worker's matcher probe added (None: not probed)


def main(argv: list[str] | None = None) -> None:
    """Serve compile jobs on the socket until the parent closes it (or kills this process)."""
    fd, parent_pid, max_mb = (int(a) for a in (argv or sys.argv[1:]))
    _die_with_parent(parent_pid)
    # Ctrl-C reaches the whole process group; the parent decides when its workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    vocab, compile_fn = conn.recv()
    fn = resolve_compile_fn(compile_fn)
    module = importlib.import_module(compile_fn.partition(":")[0])
    warm = getattr(module, "warm_up", None)
    if callable(warm):  # the compile module's one-time set-up, before the first job rather than in it
        warm()
    prepare = getattr(module, "prepare", None)
    if callable(prepare):  # likewise with the vocabulary (llguidance's tokenizer), before the cap;
        vocab = prepare(vocab) or vocab  # it may return the part of the vocabulary the jobs read
    _release_free_memory()  # what unpickling and the set-up freed, before the cap is measured
    limit_address_space(max_mb)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        answer = run_compile(fn, vocab, request)
        try:
            conn.send(answer)
        except MemoryError:  # pickling a large index can need as much again; nothing was sent
            conn.send(("memory", None))


def run_compile(fn: Any, vocab: Any, request: Any) -> tuple[str, Any]:
    """One job's answer; every failure becomes a ``ConstraintError`` the parent can unpickle."""
    try:
        return "ok", fn(vocab, request)
    except ConstraintError as e:
        return "error", e
    except MemoryError:
        return "memory", None
    except RecursionError:
        return "error", ConstraintError(f"{request.kind}: the constraint nests too deeply to compile")
    except Exception:  # a bug must fail only this request; its details go to the log, not the client
        logger.exception("compiling a %s constraint failed", request.kind)
        return "error", ConstraintError(f"{request.kind}: the constraint could not be compiled (internal error, "
                                        "logged by the server)")


def limit_address_space(max_mb: int) -> None:
    """Cap this process's address space at its current size plus ``max_mb`` MiB (0: no cap).

    The cap is relative because the interpreter, llguidance and the vocabulary are already
    mapped; what it bounds is what one compile may add. No-op where ``/proc`` or ``resource``
    is missing (the wall-time budget still holds there).
    """
    if max_mb <= 0:
        return
    try:
        import resource

        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = size + max_mb * (1 << 20)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    except (ImportError, OSError, ValueError):
        pass


def _release_free_memory() -> None:
    """Collect garbage and hand the heap's free pages back (glibc's ``malloc_trim``; no-op elsewhere)."""
    import gc

    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent goes, even mid-compile in native code."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the worker still exits when its socket closes between jobs
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def resolve_compile_fn(path: str) -> Any:
    """``"package.module:function"`` -> the function (the compile a job runs)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


if __name__ == "__main__":
    main()
