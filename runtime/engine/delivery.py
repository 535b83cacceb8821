"""Getting results from the engine thread to a ``generate`` call, and what they hold.

``RequestHandle`` is the channel of one call (shared by its requests); each request's
``Delivery`` (``req.delivery``) knows its index on that channel and how much of its output was
already streamed; ``ResultCollector`` turns the items a call receives into its return value or
stream chunks, the same way for the sync and the async API.

``final_output`` and ``stream_chunk`` build what a caller gets back; the result of one request
(``Engine.generate``)::

    {"text": str, "output_ids": list[int],
     "meta_info": {"id", "prompt_tokens", "completion_tokens", "cached_tokens",
                   "finish_reason": {"type": "stop"|"length"|"abort", "matched": str|int|None},
                   "e2e_latency", "first_token_latency", "queue_time", "forward_passes", "total_retractions",
                   # with a constraint: seconds from its grammar's request to its readiness
                   "grammar_compile_time",
                   # after a step verified draft tokens (speculative decoding, SGLang's names):
                   "spec_verify_ct", "spec_draft_tokens", "spec_accepted_tokens", "spec_accept_length",
                   # with return_logprob (SGLang's layout, entries [logprob, token_id, None]):
                   "output_token_logprobs", "output_top_logprobs",
                   "input_token_logprobs", "input_top_logprobs",
                   # with a constraint and strict=False:
                   "constraint_violations",
                   # with a schema too large for one automaton (the restriction applied):
                   "constraint_notes",
                   # when budget-aware completion closed the output (finish_reason "length"):
                   "budget_closed": {"closed": True, "tokens": int},
                   # with sampling_params.return_token_origins (codes: scheduler/req.py):
                   "token_origins": {"offset": int, "ids": [...], "origins": [...],
                                     "prompt": {"cache": int, "prefill": int}}}}

``token_origins`` of a stream chunk carries the codes from ``offset`` on (where the previous chunk
ended); the final result starts at 0.

A stream chunk has the same keys, but ``text`` is the new text since the previous chunk,
``output_ids`` the new token ids, the logprob lists cover only the new tokens, and
``finish_reason`` is None until the last chunk.

Latencies are seconds since submission: ``e2e_latency`` until this dict was built,
``first_token_latency`` until the first output token was sampled (None before that and for
``max_new_tokens == 0``), so non-streamed requests report a time to first token too. ``queue_time``
is SGLang's: from entering the waiting queue (after a grammar compiled) to the first step that ran
the request (None before it ran). A request with
``max_new_tokens == 0`` returns no output tokens: its prompt is prefilled and cached, prompt
logprobs come back if asked, and ``finish_reason`` is ``length``.
"""

from __future__ import annotations

import asyncio
import queue
import time
from dataclasses import dataclass
from typing import Any

from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.results import StopChecker


class RequestHandle:
    """Carries ``(index, kind, payload)`` items from the engine thread to one ``generate`` call.

    ``kind`` is ``"chunk"`` (a stream delta), ``"done"`` (the final result or last chunk) or
    ``"error"`` (an exception to raise in the caller). With an asyncio ``loop`` the items are
    delivered on that loop (``aget``); otherwise through a thread-safe queue (``get``).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._sync: queue.Queue = queue.Queue()
        self._async: asyncio.Queue | None = asyncio.Queue() if loop is not None else None

    def put(self, index: int, kind: str, payload: Any) -> None:
        item = (index, kind, payload)
        if self._loop is None:
            self._sync.put(item)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._async.put_nowait, item)

    def get(self) -> tuple[int, str, Any]:
        return self._sync.get()

    async def aget(self) -> tuple[int, str, Any]:
        return await self._async.get()


@dataclass
class Delivery:
    """One request's place on its call's handle, and its stream offsets (text chars, token ids)."""

    handle: RequestHandle
    index: int
    created_at: float  # time.perf_counter() at submission
    text_len: int = 0
    ids_len: int = 0
    input_logprobs_sent: bool = False

    def put(self, kind: str, payload: Any) -> None:
        self.handle.put(self.index, kind, payload)


class ResultCollector:
    """The items of one call with ``count`` requests, turned into results or stream chunks."""

    def __init__(self, count: int, single: bool) -> None:
        self.count = count
        self.single = single  # one prompt with n == 1: return the dict, not a list of one
        self.done = 0
        self._results: list[Any] = [None] * count

    @property
    def complete(self) -> bool:
        return self.done == self.count

    def add(self, item: tuple[int, str, Any]) -> None:
        """Take a non-streamed item (raises the request's error)."""
        index, kind, payload = item
        if kind == "error":
            raise payload
        self._results[index] = payload
        self.done += 1

    def result(self) -> Any:
        return self._results[0] if self.single else self._results

    def chunk(self, item: tuple[int, str, Any]) -> dict[str, Any]:
        """A streamed item as the chunk to yield (raises the request's error); a batch's carry ``index``."""
        index, kind, chunk = item
        if kind == "error":
            raise chunk
        self.done += kind == "done"
        if self.count > 1:
            chunk["index"] = index
        return chunk


def final_output(req: Req) -> dict[str, Any]:
    """The complete result dict of a finished request."""
    out = {"text": StopChecker.final_text(req), "output_ids": list(req.output_ids),
           "meta_info": _meta(req)}
    if req.origins is not None:
        out["meta_info"]["token_origins"] = _origins(req, 0)
    if req.logprobs.return_logprob:
        out["meta_info"].update(_logprob_meta(req, 0, include_input=True))
    return out


def stream_chunk(req: Req) -> dict[str, Any] | None:
    """The delta since the last chunk, or None when there is nothing new to send."""
    sent = req.delivery
    safe = StopChecker.stream_safe_len(req)
    text = req.decoded.text if not req.finished else StopChecker.final_text(req)
    delta = text[sent.text_len:safe] if safe > sent.text_len else ""
    new_ids = req.output_ids[sent.ids_len:]
    if not delta and not new_ids and not req.finished:
        return None
    first_lp = sent.ids_len
    sent.text_len = max(sent.text_len, safe)
    sent.ids_len = len(req.output_ids)
    out = {"text": delta, "output_ids": new_ids, "meta_info": _meta(req)}
    if req.origins is not None:
        out["meta_info"]["token_origins"] = _origins(req, req.origins.take())
    if req.logprobs.return_logprob:
        out["meta_info"].update(_logprob_meta(req, first_lp, include_input=not sent.input_logprobs_sent))
        sent.input_logprobs_sent = True
    return out


def _meta(req: Req) -> dict[str, Any]:
    created = req.delivery.created_at
    meta: dict[str, Any] = {
        "id": req.rid,
        "prompt_tokens": req.prompt_len,
        "completion_tokens": req.output_len,
        "cached_tokens": req.cached_tokens,
        "finish_reason": req.finished_reason.to_dict() if req.finished_reason else None,
        "e2e_latency": time.perf_counter() - created,
        "first_token_latency": None if req.first_token_at is None else req.first_token_at - created,
        "queue_time": req.queue_time,
        "forward_passes": req.forward_passes,
        "total_retractions": req.num_retractions,  # SGLang's: times the request went back to the queue
    }
    if req.spec_verify_ct:  # SGLang's names; accepted: draft tokens the model kept
        meta["spec_verify_ct"] = req.spec_verify_ct
        meta["spec_draft_tokens"] = req.spec_draft_tokens
        meta["spec_accepted_tokens"] = req.spec_accepted_tokens
        meta["spec_accept_length"] = req.spec_accepted_tokens / req.spec_verify_ct
    if req.constraint_stats is not None and req.constraint_stats.get("wait_s") is not None:
        meta["grammar_compile_time"] = req.constraint_stats["wait_s"]
    if req.constraint is not None:
        if req.finished and not req.params.strict:  # lenient mode reports what the output violates
            meta["constraint_violations"] = req.constraint.violations(StopChecker.final_text(req))
        if req.constraint.notes:
            meta["constraint_notes"] = list(req.constraint.notes)
        closed = req.constraint.budget_closed
        if closed is not None:
            meta["budget_closed"] = dict(closed)
    return meta


def _origins(req: Req, offset: int) -> dict[str, Any]:
    return {"offset": offset, "ids": req.output_ids[offset:], "origins": req.origins.codes[offset:],
            "prompt": {"cache": req.cached_tokens, "prefill": req.prompt_len - req.cached_tokens}}


def _triple(logprob: float | None, token_id: int) -> list:
    return [logprob, token_id, None]


def _top(entries: list[tuple[float, int]] | None) -> list | None:
    return None if entries is None else [_triple(lp, t) for lp, t in entries]


def _logprob_meta(req: Req, first: int, include_input: bool) -> dict[str, Any]:
    lp = req.logprobs
    ids = req.output_ids[first:]
    meta: dict[str, Any] = {
        "output_token_logprobs": [_triple(v, t) for v, t in zip(lp.output_token[first:], ids)],
        "output_top_logprobs": [_top(t) for t in lp.output_top[first:]],
    }
    if include_input:
        prompt = req.origin_input_ids[lp.start_len:] if lp.input_token else []
        meta["input_token_logprobs"] = [_triple(v, t) for v, t in zip(lp.input_token, prompt)]
        meta["input_top_logprobs"] = [_top(t) for t in lp.input_top]
    return meta
