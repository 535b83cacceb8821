"""The fan-out limits of one HTTP request, checked once before any engine call.

A route splits a request into several engine calls (``/generate``: one per prompt;
``/v1/completions`` and ``/v1/chat/completions``: one per choice), and each call alone is within
the engine's per-call limits. :func:`check_fan_out` counts the whole HTTP request instead: its
prompts against ``max_prompts_per_request``, each prompt's ``n`` against ``max_n``, and every
sequence (prompts x n) against ``max_sequences_per_request`` and the waiting-queue bound (a request
larger than the bound could never be queued, so it is a 400, not a 503 "retry"). Errors are 400s
naming the field as the client wrote it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from radixlm.runtime.server.http_errors import bad_request


def check_fan_out(args: Any, ns: Sequence[int], prompt_param: str, n_param: str) -> None:
    """400 unless a request of ``len(ns)`` prompts, prompt ``i`` asking for ``ns[i]`` sequences,
    fits the limits of ``args`` (the engine's ``ServerArgs``)."""
    if len(ns) > args.max_prompts_per_request:
        raise bad_request(f"{prompt_param}: {len(ns)} prompts in one request, more than "
                          f"max_prompts_per_request ({args.max_prompts_per_request})",
                          param=prompt_param, code="too_many_prompts")
    worst = max(ns, default=0)
    if worst > args.max_n:
        raise bad_request(f"{n_param} must be <= {args.max_n} (max_n), got {worst}", param=n_param,
                          code="invalid_value")
    total = sum(ns)
    if total > args.max_sequences_per_request:
        raise bad_request(f"{n_param}: {total} sequences (prompts x n) in one request, more than "
                          f"max_sequences_per_request ({args.max_sequences_per_request})",
                          param=n_param, code="too_many_sequences")
    limit = args.queue_limit
    if total > limit:
        raise bad_request(f"{n_param}: {total} sequences (prompts x n) in one request can never fit the "
                          f"waiting queue (max_queued_requests={limit})", param=n_param,
                          code="too_many_sequences")
