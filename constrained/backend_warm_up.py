"""``warm_up_backend``: everything a ``GrammarBackend``'s first compile would otherwise pay, done ahead.

A new backend's first constrained request meets cold caches on both sides of the compile:
- in this process, the per-vocabulary state the matcher core and the mask filters read (the
  native tokenizer ``vocab.llg``, the tables of ``vocab.tables``), built on first use;
- the compile workers, which start (interpreter, imports, the vocabulary) when the pool does, and
  whose first job imports the JSON Schema front end's lazily loaded parts.

``warm_up_backend`` runs a compile of ``WARM_UP_SCHEMA`` (a schema with a member of every common
type) on each started worker of the backend's pool (the first; see ``compile/slots.py``), outside
its cache (the cache and its statistics see nothing), builds its grammar here and walks a matcher over one document of it, filling every mask's
per-vocabulary tables. It is meant for a background thread at server start; it only fills
caches, so every mask and verdict is the same with or without it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
from radixlm.constrained.backend import GrammarBackend, build_grammar
from radixlm.constrained.compile.job import CompileRequest
from radixlm.constrained.compile.slots import CompileJob

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
    worker's first job; a worker started on demand later, ``compile/slots.py``, is not warmed),
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
    for token in _tokens(backend, WARM_UP_DOCUMENT):
        matcher.fill_mask(row)
        masks += 1
        if not matcher.accept_token(token):
            break
    return masks


def _tokens(backend: GrammarBackend, text: str) -> list[int]:
    vocab = backend.vocab
    if vocab.encode is not None:
        return list(vocab.encode(text))
    try:
        return vocab.greedy_encode(text.encode())
    except ValueError:  # a byte without a token: the start's mask alone
        return []
