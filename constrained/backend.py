"""``GrammarBackend``: compiles constraints off the engine's hot path, in worker processes with a
wall-time and a memory budget (``compile.pool``), and keeps an LRU cache of compiled grammars
bounded in entries and in bytes.

Warm-up: ``warm_up_backend``: everything a ``GrammarBackend``'s first compile would otherwise pay, done ahead.

A new backend's first constrained request meets cold caches on both sides of the compile:
- in this process, the per-vocabulary state the matcher core and the mask filters read (the
  native tokenizer ``vocab.llg``, the tables of ``vocab.tables``), built on first use;
- the compile workers, which start (interpreter, imports, the vocabulary) when the pool does, and
  whose first job imports the JSON Schema front end's lazily loaded parts.

``warm_up_backend`` runs a compile of ``WARM_UP_SCHEMA`` (a schema with a member of every common
type) on each started worker of the backend's pool (the first; see ``compile/pool.py``), outside
its cache (the cache and its statistics see nothing), builds its grammar here and walks a matcher over one document of it, filling every mask's
per-vocabulary tables. It is meant for a background thread at server start; it only fills
caches, so every mask and verdict is the same with or without it.

Compile-time warm-up (``warm_start``, the last step of ``build_grammar``): the masks along the
opening of a grammar's shortest documents, computed once when the grammar is compiled, so that
the first request does not meet them cold. A state's first mask is the expensive one on both
halves of ``GrammarMatcher.fill_mask``: the core (llguidance) builds its lexer's DFA lazily, and a
lexer state's first token-trie walk at 152k tokens costs 100-200 µs against 5-30 µs once built;
the runtime member check files a memo entry per state (``masks.members``). Both caches belong to
the compiled grammar, and compiles run in the compile pool's threads, off the batch's token path.
This is the trade xgrammar makes with its compile-time token-mask cache, kept to a bounded walk:
the opening of the shortest documents (``completion.opening_bytes``, at most ``WARM_BYTES``, each
string value given one character), tokenised as the model would write it, one mask per token: the
start's mask always, at most ``WARM_MASKS`` masks and ``WARM_SECONDS`` in all (half of it for the
search). The member check's states along it are then filed whole
(``masks.members.grow_first_visits``), so a request's first mask there is a memo hit. The masks and
every verdict are the same with or without it (``tests/constrained/test_warm_up.py``).
"""

from __future__ import annotations

import functools
import json
import logging
import pickle
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, InvalidStateError
from typing import Any

import torch
from radixlm.constrained.adapters import adapter_compile_fn
from radixlm.constrained.checks.reader import UniquePaths
from radixlm.constrained.compile.job import constraint_grammar
from radixlm.constrained.compile.pool import CompileJob, CompilePool, ThreadCompilePool
from radixlm.constrained.compile.worker import DEFAULT_COMPILE_FN, CompileRequest
from radixlm.constrained.decoding.completion import opening_bytes
from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.grammar import GRAMMAR_BASE_BYTES, CompiledGrammar
from radixlm.constrained.masks.duplicate_items import warm_tables
from radixlm.constrained.masks.members import grow_first_visits
from radixlm.constrained.masks.refusable_tokens import member_tokens_for, quote_split_for
from radixlm.constrained.masks.string_lengths import tables_for
from radixlm.constrained.vocab import TokenizerVocab

logger = logging.getLogger(__name__)
DEFAULT_MAX_MEMORY_MB = 4096  # address space one compile may add; the largest bench schemas need < 2 GB
DEFAULT_MATCHER_MAX_MB = 64  # automaton one grammar may hold in the server (the worker's probe measures it)
DEFAULT_CACHE_MB = 1024  # compiled grammars the cache holds, by their estimated size
# Outcomes whose failure says nothing about the constraint: the next identical request retries.
_RETRY = ("timeout", "crash", "shutdown")


def compile_grammar(
    vocab: TokenizerVocab,
    kind: str,
    spec: Any,
    whitespace_pattern: str | None = None,
    strict: bool = True,
    key_order: str = "schema",
) -> CompiledGrammar:
    """Compile one constraint synchronously, in this process (no budgets: for tools and tests).

    ``kind`` is ``json_schema`` (a dict or bool), ``regex`` (a string), ``ebnf`` (an EBNF or
    Lark grammar), ``choices`` (a list of strings, matched literally) or ``json_object``
    (``spec`` ignored). ``key_order`` (json_schema): "schema" (the default: declared members in
    schema order, extras only where declared) or "any" (``SamplingParams.json_key_order``).
    """
    parts = constraint_grammar(CompileRequest(kind, spec, whitespace_pattern, strict, key_order))
    return build_grammar(vocab, parts.lark, kind, spec, parts.relaxed, parts.notes, parts.unique)


def build_grammar(vocab: TokenizerVocab, lark: str, kind: str, spec: Any, relaxed: list[str] | None = None,
                  notes: list[str] | None = None, unique: UniquePaths | None = None,
                  warm: bool = True) -> CompiledGrammar:
    """The compile path's last step: the ``CompiledGrammar`` of ``lark`` and, with ``warm``, the masks
    along its shortest document computed now (``warm_start``), so the first request
    meets them built."""
    grammar = CompiledGrammar(vocab, lark, kind, spec, relaxed, notes, unique)
    if warm:
        warm_start(grammar)
    return grammar


class _Compile:
    """One compile shared by identical constraints: its job and the futures waiting on it."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.job: CompileJob | None = None
        self.waiters: list[Future] = []
        self.done = False
        self.grammar: CompiledGrammar | None = None
        self.error: ConstraintError | None = None
        self.nbytes = 0  # its share of the cache's byte count, once done
        self.hits = 0  # later requests that found it in the cache


class GrammarBackend:
    """Compiles ``SamplingParams`` constraints in worker processes; caches the results (LRU).

    ``submit(params, caller)`` returns a new ``Future[CompiledGrammar]`` at once (one per call).
    The future fails with a ``ConstraintError`` when the spec is invalid or unsupported, when
    compiling takes longer than ``compile_timeout_s`` from submission (queue time included) or
    more than ``max_memory_mb`` MiB (the worker is killed and replaced), or when the worker's
    matcher probe measured more than ``matcher_max_mb`` MiB of automaton (0: no bound): only
    then is the grammar built in this process. The queue is round-robin between callers.
    Identical constraints share one compile; cancelling a future stops the compile once no
    other future waits on it, in the worker or in the build here. Errors are cached like
    grammars, except timeouts and worker failures (the next identical request retries). The
    cache holds at most ``cache_size`` entries and ``cache_mb`` MiB of estimated grammar size
    (``CompiledGrammar.nbytes``); ``flush_cache`` empties it.
    """

    def __init__(self, vocab: TokenizerVocab, compile_timeout_s: float = 10.0, cache_size: int = 256,
                 num_workers: int = 2, max_memory_mb: int = DEFAULT_MAX_MEMORY_MB, core: str = "radixlm",
                 compile_fn: str = DEFAULT_COMPILE_FN, cache_mb: int = DEFAULT_CACHE_MB,
                 matcher_max_mb: int = DEFAULT_MATCHER_MAX_MB) -> None:
        if compile_timeout_s <= 0:
            raise ValueError(f"compile_timeout_s must be > 0, got {compile_timeout_s}")
        if cache_size < 1:
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if cache_mb < 1 or matcher_max_mb < 0:
            raise ValueError(f"cache_mb must be >= 1 and matcher_max_mb >= 0, got {cache_mb}, {matcher_max_mb}")
        # --grammar-backend: None for radixlm; an adapter compiles a whole grammar in a thread (ms, native).
        self._adapter = adapter_compile_fn(core)
        self.core = core
        self.vocab = vocab
        if core == "llguidance":  # llguidance as it ships: its four default token slices
            vocab.prepare_llg(None)
        self.compile_timeout_s = compile_timeout_s
        self.cache_size = cache_size
        self.max_memory_mb = max_memory_mb
        self.cache_bytes = cache_mb << 20
        self.matcher_max_mb = matcher_max_mb
        self._cache: OrderedDict[str, _Compile] = OrderedDict()
        self._cached_bytes = 0  # the done entries' nbytes
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "misses": 0, "timeouts": 0, "errors": 0, "cancelled": 0, "builds": 0,
                      "builds_stopped": 0, "over_matcher_bound": 0, "evicted": 0, "flushed": 0}
        self.compile_fn = compile_fn  # "module:function" run per job in a worker (tests swap it)
        self.pool = self._make_pool(num_workers) if self._adapter is None else ThreadCompilePool(
            vocab, num_workers, compile_timeout_s, 0, self._adapter)
        if self._adapter is None:  # the member check's per-vocabulary files (~0.5 s at 152k), built
            member_tokens_for(vocab).warm()  # now rather than in the first checked mask's step
            quote_split_for(vocab)  # where each token closes a string (~30 ms at 152k), likewise
            tables_for(vocab).warm()  # counted strings' tables and masks (~0.3 s at 152k), likewise
            warm_tables(vocab)  # unique arrays' tables (~0.15 s at 152k), likewise

    def _make_pool(self, num_workers: int) -> CompilePool | ThreadCompilePool:
        """Worker processes; threads in this process only where no process can be used."""
        reason = None
        if not sys.executable:
            reason = "there is no Python executable to start workers with (embedded interpreter)"
        else:
            try:
                return CompilePool(self.vocab, num_workers, self.compile_timeout_s, self.max_memory_mb,
                                   self.compile_fn)
            except (pickle.PicklingError, TypeError, AttributeError) as e:
                reason = f"the vocabulary cannot be sent to a worker process ({e})"
        logger.warning("grammar compiles run in this process: %s; a compile past its budget "
                       "fails its requests but keeps running, and memory is not bounded", reason)
        return ThreadCompilePool(self.vocab, num_workers, self.compile_timeout_s, self.max_memory_mb,
                                 self.compile_fn)

    def submit(self, params: Any, caller: Any = None) -> Future:
        """Start (or join) the compile of ``params``' constraint (a ``SamplingParams``);
        ``caller`` (any hashable: the engine's per-call id) is whose lane of the compile queue a
        new compile joins."""
        kind = params.constraint_kind
        if kind is None:
            raise ValueError("sampling params carry no constraint (json_schema/regex/ebnf/choices/json_object)")
        spec = True if kind == "json_object" else getattr(params, kind)
        req = CompileRequest(kind, spec, params.whitespace_pattern, params.strict, params.json_key_order)
        key = req.cache_key()
        fut: Future = Future()
        with self._lock:
            entry = self._cache.get(key)
            start = entry is None
            if start:
                self.stats["misses"] += 1
                entry = self._cache[key] = _Compile(key)
                entry.job = CompileJob(req, functools.partial(self._on_done, entry), caller=caller)
                self._evict()
            else:
                self._cache.move_to_end(key)
                self.stats["hits"] += 1
                entry.hits += 1
            if not entry.done:
                entry.waiters.append(fut)
        if entry.done:
            _settle(fut, entry.grammar, entry.error)
        else:
            fut.add_done_callback(functools.partial(self._on_waiter_done, entry))
        if start:
            self.pool.submit(entry.job)
        return fut

    def _on_done(self, entry: _Compile, job: CompileJob) -> None:
        """The pool finished ``entry``'s job: build the grammar here if the probe allows it and
        someone still waits, then settle every waiting future."""
        grammar, error = None, job.error
        if job.outcome == "ok":
            try:
                grammar = self._build(entry, job)
            except ConstraintError as e:
                error = e
            if grammar is None and error is None:  # every waiter left during the build
                return
        with self._lock:
            entry.done, entry.grammar, entry.error = True, grammar, error
            if error is not None:
                self.stats["timeouts" if job.outcome == "timeout" else "errors"] += 1
            if job.outcome in _RETRY and self._cache.get(entry.key) is entry:
                del self._cache[entry.key]
            elif self._cache.get(entry.key) is entry:
                entry.nbytes = _cached_size(grammar)
                self._cached_bytes += entry.nbytes
                self._evict()
            waiters, entry.waiters = entry.waiters, []
        for fut in waiters:
            _settle(fut, grammar, error)

    def _build(self, entry: _Compile, job: CompileJob) -> CompiledGrammar | None:
        """The ``CompiledGrammar`` of a finished job (None: nobody waits any more); a probe over
        ``matcher_max_mb`` is a ``ConstraintError`` and nothing is built."""
        req, parts = job.request, job.parts
        if self._adapter is not None:  # adapters: parts is the compiled grammar
            parts.compile_s = job.wall_s
            return parts
        size = parts.matcher_bytes or 0
        if self.matcher_max_mb and size > self.matcher_max_mb << 20:
            with self._lock:
                self.stats["over_matcher_bound"] += 1
            raise ConstraintError(f"{req.kind}: the grammar's matcher needs {size / (1 << 20):.0f} MB, over the "
                                  f"{self.matcher_max_mb} MB bound (--grammar-matcher-max-mb)")
        if self._abandoned(entry):
            return None
        with self._lock:
            self.stats["builds"] += 1
        grammar = build_grammar(self.vocab, parts.lark, req.kind, req.spec, parts.relaxed, parts.notes,
                                parts.unique, warm=False)
        grammar.matcher_bytes, grammar.compile_s = size, job.wall_s
        if self._abandoned(entry):
            return None
        warm_start(grammar)
        return grammar

    def _abandoned(self, entry: _Compile) -> bool:
        """Whether every future waiting on ``entry`` was cancelled (its build then stops here)."""
        with self._lock:
            if entry.waiters:
                return False
            self.stats["builds_stopped"] += 1
            return True

    def _evict(self) -> None:
        """Drop least recently used entries past ``cache_size`` or ``cache_bytes`` (lock held);
        a running compile that is dropped still answers its waiters."""
        while self._cache and (len(self._cache) > self.cache_size or self._cached_bytes > self.cache_bytes):
            _, old = self._cache.popitem(last=False)
            self._cached_bytes -= old.nbytes
            self.stats["evicted"] += 1

    def cache_info(self) -> dict[str, int]:
        """``entries`` and ``bytes`` (the estimated size of the grammars) held by the cache."""
        with self._lock:
            return {"entries": len(self._cache), "bytes": self._cached_bytes}

    def cache_entries(self) -> list[dict[str, Any]]:
        """The cached compiles, most recently used first (``entry_view``)."""
        with self._lock:
            entries = list(self._cache.values())
        return [entry_view(e.key, e.done, e.hits, e.nbytes, e.grammar, e.error) for e in reversed(entries)]

    def flush_cache(self) -> int:
        """Drop every finished entry (grammars and cached errors); compiles in flight stay, so
        their waiters and the requests that join them still share one compile. Returns how many
        entries were dropped."""
        with self._lock:
            done = [key for key, e in self._cache.items() if e.done]
            for key in done:
                self._cached_bytes -= self._cache.pop(key).nbytes
            self.stats["flushed"] += len(done)
        return len(done)

    def _on_waiter_done(self, entry: _Compile, fut: Future) -> None:
        """A waiting future was cancelled: stop the compile if nobody else waits on it."""
        if not fut.cancelled():
            return
        with self._lock:
            entry.waiters = [w for w in entry.waiters if w is not fut]
            if entry.waiters or entry.done:
                return
            if self._cache.get(entry.key) is entry:  # forgotten: a later request compiles afresh
                del self._cache[entry.key]
            self.stats["cancelled"] += 1
        self.pool.cancel(entry.job)

    def shutdown(self) -> None:
        """Kill the workers and fail the compiles in flight; never waits for a compile."""
        self.pool.shutdown()


def _cached_size(grammar: Any) -> int:
    """A cache entry's estimated bytes: the grammar's ``nbytes()`` (an adapter's grammar without
    one, or a cached error, counts a grammar's fixed share)."""
    nbytes = getattr(grammar, "nbytes", None)
    return nbytes() if callable(nbytes) else GRAMMAR_BASE_BYTES


def _settle(fut: Future, result: Any = None, exc: BaseException | None = None) -> bool:
    """Complete ``fut`` unless it already is (cancelled); True if this call completed it."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
        return True
    except InvalidStateError:
        return False


PREVIEW_CHARS = 160


def entry_view(key: str, done: bool, hits: int, nbytes: int, grammar: Any, error: Any) -> dict[str, Any]:
    """``{"kind", "spec", "state", "hits", "compile_s", "bytes", "error"}`` of one cache entry.

    ``key`` is the entry's ``CompileRequest.cache_key()`` (a JSON list: kind, spec, whitespace
    pattern, strict); ``spec`` is the constraint shortened to ``PREVIEW_CHARS`` characters;
    ``state`` is ``compiling``, ``ready`` or ``error``; ``hits`` counts the requests that found
    the entry in the cache (the first, which started the compile, is not a hit)."""
    try:
        kind, spec = json.loads(key)[:2]
    except (ValueError, TypeError):
        kind, spec = "?", key
    text = spec if isinstance(spec, str) else json.dumps(spec, ensure_ascii=False, sort_keys=True)
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "\u2026"
    state = "compiling" if not done else "error" if error is not None else "ready"
    return {"kind": kind, "spec": text, "state": state, "hits": hits,
            "compile_s": getattr(grammar, "compile_s", None), "bytes": nbytes,
            "error": None if error is None else str(error)}


# One of each member kind a request's schema commonly holds: the compile imports what they need and
# the walk below fills the string, number, enum, array and nested-object masks' tables.
WARM_UP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "ok": {"type": "boolean"},
        "kind": {"enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "where": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                  "required": ["city"]},
    },
    "required": ["name", "count", "ratio", "ok", "kind", "tags", "where"],
    "additionalProperties": False,
}
WARM_UP_DOCUMENT = ('{"name":"ab","count":12,"ratio":1.5,"ok":true,"kind":"a",'
                    '"tags":["x"],"where":{"city":"Oslo"}}')


def warm_up_backend(backend: GrammarBackend, timeout_s: float | None = None) -> dict[str, Any]:
    """Fill ``backend``'s first-use caches (see the module docstring); returns what it did:
    ``compile`` (the warm-up compile's outcome: ``ok``, or why it failed), ``masks`` (masks
    computed on the walk) and ``seconds``. Never raises for a failed compile: the warm-up is an
    optimisation, and a real request would meet (and report) the same failure."""
    start = time.perf_counter()
    if backend.core == "radixlm":
        backend.vocab.llg  # noqa: B018 - the native tokenizer, built once (~1 s at 152k tokens)
    jobs = _compile(backend, backend.compile_timeout_s if timeout_s is None else timeout_s)
    job = next((j for j in jobs if j.outcome == "ok"), jobs[0])
    masks = 0
    if job.outcome == "ok":
        masks = _walk(backend, job)
    return {"compile": job.outcome, "masks": masks, "seconds": time.perf_counter() - start}


def _compile(backend: GrammarBackend, timeout_s: float) -> list[CompileJob]:
    """The warm-up schema's compile, once per started worker (each idle slot takes one: every
    worker's first job; a worker started on demand later, ``compile/pool.py``, is not warmed),
    run by the pool and waited for."""
    done = threading.Semaphore(0)
    jobs = [CompileJob(CompileRequest("json_schema", WARM_UP_SCHEMA), lambda _job: done.release(), caller="warm-up")
            for _ in range(backend.pool.started_slots)]
    for job in jobs:
        backend.pool.submit(job)
    deadline = time.monotonic() + timeout_s + 5.0  # the pool reports a timeout itself; this is a backstop
    for _ in jobs:
        if not done.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            for late in jobs:
                if late.outcome == "pending":
                    backend.pool.cancel(late)
                    late.outcome = "timeout"
            break
    return jobs


def _walk(backend: GrammarBackend, job: CompileJob) -> int:
    """Build the grammar here (radixlm's core) and compute the masks along ``WARM_UP_DOCUMENT``."""
    if backend.core == "radixlm":
        parts = job.parts
        grammar = build_grammar(backend.vocab, parts.lark, "json_schema", WARM_UP_SCHEMA, parts.relaxed,
                                parts.notes, parts.unique)
    else:  # an adapter's job result is the compiled grammar
        grammar = job.parts
    matcher = grammar.matcher()
    row = torch.zeros(backend.vocab.mask_words, dtype=torch.int32)
    masks = 0
    for token in _tokens(backend.vocab, WARM_UP_DOCUMENT.encode()):
        matcher.fill_mask(row)
        masks += 1
        if not matcher.accept_token(token):
            break
    return masks


WARM_BYTES = 256  # the shortest document searched for (a completion search's first budget)
WARM_MASKS = 16  # masks computed at most: a walk's cold first visits are mostly its first eight masks
WARM_FILL = ord("a")  # string values get one character: the lexer's state inside a string, not only at its ends
WARM_SECONDS = 0.005  # wall time in all (the search half of it), checked between masks


def warm_start(grammar: Any) -> int:
    """Compute the masks along the opening of ``grammar``'s shortest documents on a throwaway
    matcher, filling the grammar's shared caches; returns how many masks were computed."""
    deadline = time.perf_counter() + WARM_SECONDS
    matcher = grammar.matcher()
    text = opening_bytes(matcher, WARM_BYTES, WARM_SECONDS / 2, fill=WARM_FILL)
    ids = _tokens(grammar.vocab, text) if text else []
    row = torch.zeros(grammar.vocab.mask_words, dtype=torch.int32)
    matcher.fill_mask(row)  # the start, whatever the search found
    done = 1
    for token in ids[:WARM_MASKS - 1]:
        if time.perf_counter() > deadline or not matcher.accept_token(token):
            break
        matcher.fill_mask(row)
        done += 1
    if grammar.unique_tracker is not None:  # states every output meets: whole entries, not records
        grow_first_visits(grammar.unique_tracker)
    return done


def _tokens(vocab: Any, text: bytes) -> list[int]:
    """``text`` as the model's tokenizer writes it, or longest-match where the vocabulary has no
    encoder (or the text is no UTF-8); none where a byte has no token (the warm-up then masks the
    start alone: it only fills caches, and must never fail a compile)."""
    if vocab.encode is not None:
        try:
            return list(vocab.encode(text.decode("utf-8")))
        except UnicodeDecodeError:
            pass
    try:
        return vocab.greedy_encode(text)
    except ValueError:
        return []
