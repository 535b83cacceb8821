"""What the scheduler does with one request's part of a step's results (plain Python, no torch).

The scheduler keeps the queues and the KV accounts (``Scheduler.process_batch_result``); these
helpers change only the request: its tokens, its logprobs, and whether it finished.
"""

from __future__ import annotations

from radixlm.runtime.scheduler.batch import BatchResult, ScheduledBatch
from radixlm.runtime.scheduler.constraint import Splice
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.speculation import Drafter
from radixlm.runtime.scheduler.stop_checker import StopChecker

Top = list[tuple[float, int]]


def take_token(req: Req, token: int, result: BatchResult, row: int, stop_checker: StopChecker) -> None:
    """Append the sampled ``token`` (row ``row`` of ``result``), ask the request's constraint,
    run the stop checks."""
    logprob = (result.next_token_logprobs[row], result.next_top_logprobs[row]) if result.next_token_logprobs else None
    _take(req, token, "free" if req.constraint is None else "masked", logprob, stop_checker)


def take_verified(req: Req, draft: list[int], result: BatchResult, row: int, stop_checker: StopChecker,
                  drafter: Drafter) -> None:
    """A verify step's tokens for ``req``: its first ``result.accepted[row]`` draft tokens, then
    the model's token after them, each taken as a sampled token; stops at the first that
    finishes the request (the rest were never generated)."""
    accepted = result.accepted[row]
    for j, token in enumerate(draft[:accepted]):
        logprob = ((result.draft_logprobs[row][j], result.draft_top_logprobs[row][j])
                   if result.next_token_logprobs else None)
        _take(req, token, drafter.origin(req, j), logprob, stop_checker)
        if req.finished:
            return
    take_token(req, result.next_token_ids[row], result, row, stop_checker)


def _take(req: Req, token: int, origin: str, logprob: tuple[float, Top] | None, stop_checker: StopChecker) -> None:
    """One token, exactly as decoding one token a step takes it: append, the constraint, the stop
    checks, then the budget close (so a verify step closes at the very token a plain step would)."""
    req.logprobs.finish_input(req.wants_input_logprobs)
    req.append_token(token, origin)
    if logprob is not None:
        req.logprobs.add_output(*logprob)
    constraint = req.constraint
    if constraint is not None:
        reason = constraint.accept(token)
        if reason is not None:
            req.finish(reason.type, reason.matched, reason.message)
    stop_checker.check(req)
    if constraint is not None and not req.finished:
        splice = constraint.close(req.output_len, req.params.max_new_tokens)
        if splice is not None:
            apply_close(req, splice)


def finish_prefill_only(batch: ScheduledBatch) -> None:
    """``max_new_tokens == 0`` requests whose whole prompt is now in the KV finish as ``length``."""
    for req in batch.reqs:
        if req.prefill_only and not req.finished and req.kv.kv_len == req.fill_len:
            req.logprobs.finish_input(req.wants_input_logprobs)
            req.finish("length")


def apply_close(req: Req, splice: Splice) -> None:
    """Append a budget close's completion and finish ``req``: ``length`` when the completion
    closed the output early, ``stop`` when the text was already complete."""
    req.append_closing(splice.new_ids)
    req.finish("length" if splice.closed else "stop")
