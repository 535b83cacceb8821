"""The matcher probe: a compile's grammar built once against the vocabulary inside the budgeted
worker, so its automaton's cost is known before the engine's process builds it.

llguidance builds its lexer lazily, and what the compile path's warm-up then walks (the start's
mask and the forced text, ``decoding/warm_start.py``) can cost seconds and hundreds of MB for a
small grammar text (``x{400000}``: a 400,000-byte forced prefix). ``probe_matcher`` does that
work in the worker, under the worker's wall and memory budgets, and reports the memory it added;
``GrammarBackend`` builds in its own process only grammars whose probe stayed under
``--grammar-matcher-max-mb``, and counts that size in its byte-bounded cache.
llguidance objects do not pickle, so the worker reports the size, and the server rebuilds.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

import llguidance
from radixlm.constrained.errors import ConstraintError

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
