"""What a caller gets back: the result dicts, stream chunks, and the handle that carries them.

Result of one request (``Engine.generate``)::

    {"text": str, "output_ids": list[int],
     "meta_info": {"id", "prompt_tokens", "completion_tokens", "cached_tokens",
                   "finish_reason": {"type": "stop"|"length"|"abort", "matched": str|int|None},
                   "e2e_latency", "first_token_latency", "forward_passes",
                   # with return_logprob (SGLang's layout, entries [logprob, token_id, None]):
                   "output_token_logprobs", "output_top_logprobs",
                   "input_token_logprobs", "input_top_logprobs",
                   # with a constraint and strict=False:
                   "constraint_violations",
                   # with a schema too large for one automaton (the restriction applied):
                   "constraint_notes"}}

A stream chunk has the same keys, but ``text`` is the new text since the previous chunk,
``output_ids`` the new token ids, the logprob lists cover only the new tokens, and
``finish_reason`` is None until the last chunk.

Latencies are seconds since submission: ``e2e_latency`` until this dict was built,
``first_token_latency`` until the first output token was sampled (None before that and for
``max_new_tokens == 0``), so non-streamed requests report a time to first token too. A request with
``max_new_tokens == 0`` returns no output tokens: its prompt is prefilled and cached, prompt
logprobs come back if asked, and ``finish_reason`` is ``length``.
"""

from __future__ import annotations

import asyncio
import queue
import time
from typing import Any

from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.stop_checker import StopChecker


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


def final_output(req: Req) -> dict[str, Any]:
    """The complete result dict of a finished request."""
    out = {"text": StopChecker.final_text(req), "output_ids": list(req.output_ids),
           "meta_info": _meta(req)}
    if req.return_logprob:
        out["meta_info"].update(_logprob_meta(req, 0, include_input=True))
    return out


def stream_chunk(req: Req) -> dict[str, Any] | None:
    """The delta since the last chunk, or None when there is nothing new to send."""
    safe = StopChecker.stream_safe_len(req)
    text = req.text if not req.finished else StopChecker.final_text(req)
    delta = text[req.sent_text_len:safe] if safe > req.sent_text_len else ""
    new_ids = req.output_ids[req.sent_ids_len:]
    if not delta and not new_ids and not req.finished:
        return None
    first_lp = req.sent_ids_len
    req.sent_text_len = max(req.sent_text_len, safe)
    req.sent_ids_len = len(req.output_ids)
    out = {"text": delta, "output_ids": new_ids, "meta_info": _meta(req)}
    if req.return_logprob:
        out["meta_info"].update(_logprob_meta(req, first_lp, include_input=req.sent_logprobs_len == 0))
        req.sent_logprobs_len = 1
    return out


def _meta(req: Req) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": req.rid,
        "prompt_tokens": req.prompt_len,
        "completion_tokens": req.output_len,
        "cached_tokens": req.cached_tokens,
        "finish_reason": req.finished_reason.to_dict() if req.finished_reason else None,
        "e2e_latency": time.perf_counter() - req.created_at,
        "first_token_latency": None if req.first_token_at is None else req.first_token_at - req.created_at,
        "forward_passes": req.forward_passes,
    }
    if req.constraint_violations is not None:
        meta["constraint_violations"] = list(req.constraint_violations)
    if req.grammar is not None and req.grammar.grammar.notes:
        meta["constraint_notes"] = list(req.grammar.grammar.notes)
    return meta


def _triple(logprob: float | None, token_id: int) -> list:
    return [logprob, token_id, None]


def _top(entries: list[tuple[float, int]] | None) -> list | None:
    return None if entries is None else [_triple(lp, t) for lp, t in entries]


def _logprob_meta(req: Req, first: int, include_input: bool) -> dict[str, Any]:
    ids = req.output_ids[first:]
    lps = req.output_token_logprobs[first:]
    meta: dict[str, Any] = {
        "output_token_logprobs": [_triple(lp, t) for lp, t in zip(lps, ids)],
        "output_top_logprobs": [_top(t) for t in req.output_top_logprobs[first:]],
    }
    if include_input:
        prompt = req.origin_input_ids[req.logprob_start_len:] if req.input_token_logprobs else []
        meta["input_token_logprobs"] = [_triple(lp, t) for lp, t in zip(req.input_token_logprobs, prompt)]
        meta["input_top_logprobs"] = [_top(t) for t in req.input_top_logprobs]
    return meta
