"""What the scheduler does with one request's part of a step's results (plain Python, no torch).

The scheduler keeps the queues and the KV accounts (``Scheduler.process_batch_result``); these
helpers change only the request: its tokens, its logprobs, and whether it finished.
"""

from __future__ import annotations

from radixlm.runtime.scheduler.batch import BatchResult, ScheduledBatch
from radixlm.runtime.scheduler.constraint import Splice
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.stop_checker import StopChecker


def take_token(req: Req, token: int, result: BatchResult, row: int, stop_checker: StopChecker) -> None:
    """Append the sampled ``token`` (row ``row`` of ``result``), ask the request's constraint,
    run the stop checks."""
    req.logprobs.finish_input(req.wants_input_logprobs)
    req.append_token(token, "free" if req.matcher is None else "masked")
    if result.next_token_logprobs:
        req.logprobs.add_output(result.next_token_logprobs[row], result.next_top_logprobs[row])
    if req.matcher is not None:
        reason = req.matcher.accept(token)
        if reason is not None:
            req.finish(reason.type, reason.matched, reason.message)
    stop_checker.check(req)


def finish_prefill_only(batch: ScheduledBatch) -> None:
    """``max_new_tokens == 0`` requests whose whole prompt is now in the KV finish as ``length``."""
    for req in batch.reqs:
        if req.prefill_only and not req.finished and req.kv.kv_len == req.fill_len:
            req.logprobs.finish_input(req.wants_input_logprobs)
            req.finish("length")


def apply_splice(req: Req, splice: Splice, stop_checker: StopChecker) -> None:
    """Replace ``req``'s output tail with the constraint's forced ids (its KV already released),
    then finish it if the grammar terminated (as ``length`` when the budget closed it), else run the
    stop checks over the new ids."""
    req.replace_tail(splice.num_drop, splice.new_ids, splice.resampled, splice.closed)
    if splice.closed:
        req.finish("length")
    elif splice.terminated:
        req.finish("stop")
    else:
        stop_checker.check(req, num_new=max(len(splice.new_ids), 1))
