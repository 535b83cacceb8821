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

The matcher probe (``probe_matcher``): a compile's grammar built once against the vocabulary
inside this budgeted worker, so its automaton's cost is known before the engine's process builds
it. llguidance builds its lexer lazily, and what the compile path's warm-up then walks (the
start's mask and the forced text, ``backend.warm_start``) can cost seconds and hundreds of MB for a
small grammar text (``x{400000}``: a 400,000-byte forced prefix). The probe does that work here,
under the worker's wall and memory budgets, and reports the memory it added; ``GrammarBackend``
builds in its own process only grammars whose probe stayed under ``--grammar-matcher-max-mb``, and
counts that size in its byte-bounded cache. llguidance objects do not pickle, so the worker
reports the size, and the server rebuilds (``build_core``).
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

import llguidance
from radixlm.constrained.checks.reader import UniquePaths
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


# llguidance's per-step budgets (a mask never takes more than milliseconds; past them the matcher
# stops and the request ends alone); more fuel for the first lexer build of a large schema. The
# lexer's states are built lazily and shared by every matcher of a grammar, and a step that runs
# out of fuel files the state it was building as dead for all of them: with llguidance's default
# step fuel (200,000, well under a millisecond), a matcher that accepts a long text without masks
# after another one's mask refuses valid text from there on (tests/constrained/test_shared_lexer.py).
MATCHER_LIMITS = llguidance.LLParserLimits(initial_lexer_fuel=4_000_000, step_lexer_fuel=4_000_000,
                                           verbose_errors=False)
# Masks hold every token that keeps the text valid: llguidance's default ("forcing") would allow
# only the canonical tokenisation of forced text; jump-forward re-tokenises forced text instead.
LARK_HEADER = '%llguidance {"no_forcing": true}\n'
# Bytes the engine's process holds per forced byte while its warm-up walks a forced prefix (the
# matcher's per-token records, the lexer states along it): x{400000} adds ~126 MB, a{1000000} ~618 MB.
FORCED_BYTE_COST = 512


@dataclass(frozen=True)
class ProbeVocab:
    """What a probe reads of a ``TokenizerVocab``: its llguidance tokenizer and single-byte tokens
    (a compile worker keeps these instead of the whole vocabulary)."""

    llg: Any
    byte_tokens: tuple[int, ...]


def build_core(vocab: Any, lark: str, kind: str) -> Any:
    """llguidance's matcher of ``lark`` over ``vocab`` (``ConstraintError`` if it does not compile)."""
    core = llguidance.LLMatcher(vocab.llg, llguidance.LLMatcher.grammar_from_lark(LARK_HEADER + lark),
                                log_level=0, limits=MATCHER_LIMITS)
    if core.is_error():
        raise ConstraintError(f"{kind}: cannot compile grammar: {core.get_error()[:300]}")
    return core


def probe_matcher(vocab: Any, lark: str, kind: str) -> int:
    """Build ``lark``'s matcher and walk what the warm-up walks (the start's mask, the forced
    text one byte token at a time, the mask after it); return the estimated memory the grammar
    costs the engine's process, in bytes: what the allocator holds for the matcher here (or the
    resident memory gained, if larger) plus ``FORCED_BYTE_COST`` per forced byte, the per-byte
    state the engine-side walk keeps (llguidance frees its own walk's states here, while the
    engine's matcher records every accepted token). Meant for a compile worker: the worker's
    wall and memory budgets bound the probe itself."""
    before, rss_before = _allocated_bytes(), _resident_bytes()
    core = build_core(vocab, lark, kind)
    core.compute_bitmask()
    forced = core.compute_ff_bytes()
    ids = [vocab.byte_tokens[b] for b in forced]
    if forced and min(ids) >= 0 and core.try_consume_tokens(ids) == len(ids):
        core.compute_bitmask()
    grown = max(_allocated_bytes() - before, _resident_bytes() - rss_before, 0)
    del core
    return grown + FORCED_BYTE_COST * len(forced)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


def _mallinfo2() -> Any:
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):  # not glibc >= 2.33
        return None
    fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _mallinfo2()


def _allocated_bytes() -> int:
    """Bytes the C allocator has handed out and not taken back (llguidance allocates through it),
    unlike resident memory blind to freed blocks a new job reuses; resident memory where glibc's
    ``mallinfo2`` is missing."""
    if _MALLINFO2 is not None:
        info = _MALLINFO2()
        return info.uordblks + info.hblkhd
    return _resident_bytes()


def _resident_bytes() -> int:
    """This process's resident memory in bytes (0 where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


if __name__ == "__main__":
    main()
