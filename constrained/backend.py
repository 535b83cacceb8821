"""``GrammarBackend``: compiles constraints off the engine's hot path, with a time budget and an
LRU cache of compiled grammars."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import Any

from radixlm.constrained.errors import ConstraintError
from radixlm.constrained.grammar import CompiledGrammar
from radixlm.constrained.json_schema import DEFAULT_MAX_REF_DEPTH, any_json_regex, schema_to_regex
from radixlm.constrained.pattern_chars import escape_literal
from radixlm.constrained.vocab import TokenizerVocab

logger = logging.getLogger(__name__)
JSON_OBJECT_DEPTH = 2  # the object plus one container level inside it: {"a": [1], "b": {"c": 2}}


def compile_grammar(
    vocab: TokenizerVocab,
    kind: str,
    spec: Any,
    whitespace_pattern: str | None = None,
    strict: bool = True,
    max_ref_depth: int = DEFAULT_MAX_REF_DEPTH,
    max_regex_chars: int | None = None,
) -> CompiledGrammar:
    """Compile one constraint synchronously (what the backend's worker threads run).

    ``kind`` is ``json_schema`` (a dict or bool), ``regex`` (a string), ``choices`` (a list of
    strings, matched literally) or ``json_object`` (``spec`` ignored).
    """
    relaxed: list[str] = []
    notes: list[str] = []
    if kind == "json_schema":
        out = schema_to_regex(spec, whitespace_pattern, strict, max_ref_depth, max_regex_chars=max_regex_chars)
        regex, relaxed = out.regex, out.relaxed
        if out.max_ref_depth is not None and out.max_ref_depth < max_ref_depth:
            notes.append(f"schema too large for one automaton: recursive $refs expand at most "
                         f"{out.max_ref_depth} times")
        if out.optional_depth is not None:
            notes.append(f"schema too large for one automaton: objects nested deeper than "
                         f"{out.optional_depth} levels generate only their required members")
        for note in notes:
            logger.warning("json_schema: %s", note)
    elif kind == "regex":
        if not isinstance(spec, str) or not spec:
            raise ConstraintError("regex must be a non-empty string")
        regex = spec
    elif kind == "choices":
        if not isinstance(spec, list) or not spec or not all(isinstance(c, str) and c for c in spec):
            raise ConstraintError("choices must be a non-empty list of non-empty strings")
        # Longest first: outlines-core alternations are leftmost-first ("a" would shadow "ab").
        ordered = sorted(dict.fromkeys(spec), key=len, reverse=True)
        regex = "(" + "|".join(escape_literal(c) for c in ordered) + ")"
    elif kind == "json_object":
        ws = f"({whitespace_pattern})" if whitespace_pattern else ""
        inner = any_json_regex(JSON_OBJECT_DEPTH - 1, whitespace_pattern or "")
        member = rf'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{{4}})*"{ws}:{ws}{inner}'
        regex = rf"\{{{ws}({member}({ws},{ws}{member})*)?{ws}\}}"
    else:
        raise ConstraintError(f"unknown constraint kind {kind!r}")
    return CompiledGrammar(vocab, regex, kind, spec, relaxed, notes)


def cache_key(kind: str, spec: Any, whitespace_pattern: str | None, strict: bool) -> str:
    return json.dumps([kind, spec, whitespace_pattern, strict], sort_keys=True, ensure_ascii=False)


class GrammarBackend:
    """Compiles ``SamplingParams`` constraints in worker threads; caches the results (LRU).

    ``submit(params)`` returns a ``Future[CompiledGrammar]`` at once. The future fails with a
    ``ConstraintError`` when the spec is invalid or unsupported, or when compiling takes longer
    than ``compile_timeout_s`` (the worker finishes in the background; a grammar that does
    finish is cached for the next request). Identical concurrent requests share one compile.
    """

    def __init__(self, vocab: TokenizerVocab, compile_timeout_s: float = 10.0, cache_size: int = 256,
                 max_ref_depth: int = DEFAULT_MAX_REF_DEPTH, num_workers: int = 2,
                 max_regex_chars: int | None = None) -> None:
        if compile_timeout_s <= 0:
            raise ValueError(f"compile_timeout_s must be > 0, got {compile_timeout_s}")
        if cache_size < 1:
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        self.vocab = vocab
        self.compile_timeout_s = compile_timeout_s
        self.cache_size = cache_size
        self.max_ref_depth = max_ref_depth
        self.max_regex_chars = max_regex_chars  # None: json_schema.MAX_REGEX_CHARS
        self._pool = ThreadPoolExecutor(max_workers=num_workers, thread_name_prefix="grammar")
        self._cache: OrderedDict[str, Future] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "misses": 0, "timeouts": 0, "errors": 0}

    def submit(self, params: Any) -> Future:
        """Start (or reuse) the compile of ``params``' constraint (a ``SamplingParams``)."""
        kind = params.constraint_kind
        if kind is None:
            raise ValueError("sampling params carry no constraint (json_schema/regex/choices/json_object)")
        spec = True if kind == "json_object" else getattr(params, kind)
        key = cache_key(kind, spec, params.whitespace_pattern, params.strict)
        with self._lock:
            fut = self._cache.get(key)
            if fut is not None and not (fut.done() and fut.exception() is not None
                                        and getattr(fut, "timed_out", False)):
                self._cache.move_to_end(key)
                self.stats["hits"] += 1
                return fut
            self.stats["misses"] += 1
            fut = Future()
            self._cache[key] = fut
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        self._pool.submit(self._run, fut, key, kind, spec, params.whitespace_pattern, params.strict)
        return fut

    def _run(self, fut: Future, key: str, kind: str, spec: Any, ws: str | None, strict: bool) -> None:
        timer = threading.Timer(self.compile_timeout_s, self._expire, (fut,))
        timer.daemon = True
        timer.start()
        start = time.perf_counter()
        try:
            grammar = compile_grammar(self.vocab, kind, spec, ws, strict, self.max_ref_depth, self.max_regex_chars)
        except ConstraintError as e:
            self.stats["errors"] += 1
            _settle(fut, exc=e)
        except Exception as e:  # a bug or an engine error must still fail only this request
            self.stats["errors"] += 1
            _settle(fut, exc=ConstraintError(f"{kind}: compile failed: {type(e).__name__}: {e}"))
        else:
            grammar.compile_s = time.perf_counter() - start
            if not _settle(fut, result=grammar):
                with self._lock:  # finished after the deadline: cache it for the next request
                    done = Future()
                    done.set_result(grammar)
                    self._cache[key] = done
        finally:
            timer.cancel()

    def _expire(self, fut: Future) -> None:
        err = ConstraintError(f"grammar compilation exceeded the {self.compile_timeout_s:g} s budget")
        fut.timed_out = True  # before settling: submit() must never see a bare timeout
        if _settle(fut, exc=err):
            self.stats["timeouts"] += 1
        else:
            fut.timed_out = False

    def shutdown(self) -> None:
        """Stop the workers (running compiles finish in the background)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _settle(fut: Future, result: Any = None, exc: BaseException | None = None) -> bool:
    """Complete ``fut`` unless it already is; True if this call completed it."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
        return True
    except InvalidStateError:
        return False
