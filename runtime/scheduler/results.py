"""What a step's tokens do to a request (plain Python, no torch): each token taken, and whether
it finished the request.

The scheduler keeps the queues and the KV accounts (``Scheduler.process_batch_result``); these
helpers change only the request: its tokens, its logprobs, and whether it finished.

Finish conditions (``StopChecker``), checked after each token, in order: EOS / ``stop_token_ids``
(the token itself; ``ignore_eos`` skips EOS only),
``stop`` strings (matched in the decoded text, so a stop string split over several tokens is
found), ``stop_regex`` patterns (the earliest match anywhere in the text), then
``max_new_tokens``, then the context length. EOS, stop ids, stop strings and stop regexes count
only once ``min_new_tokens`` tokens exist (the sampler also masks EOS and stop ids before that).
A streamed request holds back the last ``len(longest stop) - 1`` characters; with ``stop_regex``
it holds back the text from the earliest start of a match still in progress. Stop regexes run on
a linear-time matcher fed only the new text (``runtime/stop_regex.py``), never Python's ``re``.
"""

from __future__ import annotations

from radixlm.runtime.scheduler.batch import BatchResult, ScheduledBatch
from radixlm.runtime.scheduler.constraint import Splice
from radixlm.runtime.scheduler.req import Req, TextState
from radixlm.runtime.scheduler.speculation import Drafter
from radixlm.runtime.stop_regex import StopRegexMatcher


class StopChecker:
    """Decides whether a request has finished; ``eos_token_ids`` come from the tokenizer."""

    def __init__(self, eos_token_ids: list[int], context_len: int) -> None:
        self.eos_token_ids = frozenset(eos_token_ids)
        self.context_len = context_len

    def check(self, req: Req) -> None:
        """Set ``req.finished_reason`` if the last token finished it (called once per token taken)."""
        if req.finished:
            return
        params = req.params
        if req.output_len >= params.min_new_tokens and req.output_ids:
            token = req.output_ids[-1]
            if token in params.stop_token_ids or (token in self.eos_token_ids and not params.ignore_eos):
                req.finish("stop", token)
                return
            for patterns, find in ((params.stop, self._find_stop_string), (params.stop_regex, self._find_stop_regex)):
                found = find(req.decoded, patterns) if patterns and req.decoded.detokenizer is not None else None
                if found is not None:
                    req.decoded.stop_pos = found[0]
                    req.finish("stop", found[1])
                    return
        if req.output_len >= params.max_new_tokens:
            req.finish("length")
        elif req.fill_len >= self.context_len:
            req.finish("length", message="reached the context length")

    @staticmethod
    def _find_stop_string(decoded: TextState, stop: list[str]) -> tuple[int, str] | None:
        # Only text not yet searched, plus a stop string's length before it, can hold a new match.
        longest = max(len(s) for s in stop)
        start = max(decoded.checked_len - longest + 1, 0)
        decoded.checked_len = len(decoded.text)
        tail = decoded.text[start:]
        first: tuple[int, str] | None = None
        for s in stop:
            i = tail.find(s)
            if i != -1 and (first is None or i < first[0]):
                first = (i, s)
        return None if first is None else (start + first[0], first[1])

    @staticmethod
    def _find_stop_regex(decoded: TextState, patterns: list[str]) -> tuple[int, str] | None:
        # The matcher keeps its state across steps and scans only the text added since the last one.
        if decoded.regex is None:
            decoded.regex = StopRegexMatcher(patterns)
        return decoded.regex.search(decoded.text)

    @staticmethod
    def final_text(req: Req) -> str:
        """The output text, cut before the first stop string unless ``no_stop_trim``."""
        reason, text = req.finished_reason, req.decoded.text
        if reason is None or not isinstance(reason.matched, str) or req.params.no_stop_trim:
            return text
        return text if req.decoded.stop_pos is None else text[:req.decoded.stop_pos]

    @staticmethod
    def stream_safe_len(req: Req) -> int:
        """How much of the text may be streamed: hold back a possible prefix of a stop string."""
        if req.finished:
            return len(StopChecker.final_text(req))
        safe = len(req.decoded.text)
        if req.params.stop_regex:  # text not yet scanned, or where a match may have begun, waits
            safe = 0 if req.decoded.regex is None else req.decoded.regex.safe_len()
        if req.params.stop:
            safe = min(safe, len(req.decoded.text) - max(len(s) for s in req.params.stop) + 1)
        return max(safe, 0)


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
