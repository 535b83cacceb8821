"""What a caller gets back: the result dicts and stream chunks (``delivery`` carries them).

Result of one request (``Engine.generate``)::

    {"text": str, "output_ids": list[int],
     "meta_info": {"id", "prompt_tokens", "completion_tokens", "cached_tokens",
                   "finish_reason": {"type": "stop"|"length"|"abort", "matched": str|int|None},
                   "e2e_latency", "first_token_latency", "forward_passes", "total_retractions",
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
                   # with sampling_params.return_token_origins (codes: scheduler/req_origins.py):
                   "token_origins": {"offset": int, "ids": [...], "origins": [...],
                                     "prompt": {"cache": int, "prefill": int}}}}

``token_origins`` of a stream chunk carries the codes from ``offset`` on (where the previous chunk
ended); the final result starts at 0.

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

import time
from typing import Any

from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.stop_checker import StopChecker


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
        "forward_passes": req.forward_passes,
        "total_retractions": req.num_retractions,  # SGLang's: times the request went back to the queue
    }
    if req.spec_verify_ct:  # SGLang's names; accepted: draft tokens the model kept
        meta["spec_verify_ct"] = req.spec_verify_ct
        meta["spec_draft_tokens"] = req.spec_draft_tokens
        meta["spec_accepted_tokens"] = req.spec_accepted_tokens
        meta["spec_accept_length"] = req.spec_accepted_tokens / req.spec_verify_ct
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
