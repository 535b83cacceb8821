"""Admission of waiting requests into one prefill step (plain Python, no torch).

In policy order (``policy.order_waiting``), each candidate's prompt is matched in the radix cache
(never the whole prompt: the last token is always recomputed to get its logits; with prompt
logprobs the match stops at ``logprob_start_len``), the match is locked, and slots are allocated
for the rest, within the step's token budget and the reserve kept for the running requests'
future tokens (``reserve_tokens``, scaled by the scheduler's ``new_token_ratio``). A prompt that
does not fit the budget is cut into a chunk (with chunking on); a request sharing an uncached
prefix with one admitted in this step waits a step to hit the cache instead.

The scheduler owns the queues: ``admit`` only says which requests it admitted and which one it
cut, and the scheduler takes them off its waiting queue.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixlm.runtime.scheduler.policy import order_waiting, shares_uncached_prefix
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.req_cache import ReqCache

RESERVE_CLIP = 4096  # reserve for at most this many future tokens per request


@dataclass(frozen=True)
class AdmissionLimits:
    """The fixed rules of admission, from the scheduler's arguments."""

    policy: str  # schedule_policy: lpm | dfs-weight | fcfs
    max_running: int
    chunk_size: int | None  # None: no chunking (the first request goes whole, even past the budget)


@dataclass
class Admitted:
    """What one ``admit`` call took: the admitted requests, in order, and the one cut into a chunk."""

    reqs: list[Req]
    chunked: Req | None


def match_limit(req: Req) -> int:
    """The longest prefix of ``req``'s prompt that may come from the cache."""
    limit = req.fill_len - 1
    if req.wants_input_logprobs:
        limit = min(limit, req.logprobs.start_len)
    return limit


def reserve_tokens(reqs: list[Req], new_token_ratio: float) -> float:
    """Slots kept for the future tokens of ``reqs`` (SGLang's estimate)."""
    return sum(min(r.remaining_new_tokens, RESERVE_CLIP) for r in reqs) * new_token_ratio


def admit(cache: ReqCache, limits: AdmissionLimits, candidates: list[Req], running: list[Req],
          step: list[Req], budget: int, new_token_ratio: float, whole: bool = False) -> Admitted:
    """Admit ``candidates`` in policy order into this step's requests ``step`` (appended to),
    at most ``budget`` new tokens; ``whole``: none is cut, those that do not fit wait."""
    matches: dict[int, tuple[list[int], object]] = {}  # lpm's matches, reused while nothing is evicted

    def prefix_len(req: Req) -> int:
        matches[id(req)] = cache.match(req, match_limit(req))
        return len(matches[id(req)][0])

    order = order_waiting(candidates, limits.policy, prefix_len)
    evictions = cache.num_evictions
    reserve = reserve_tokens(running, new_token_ratio)
    out = Admitted([], None)
    for req in order:
        if len(running) + len(step) >= limits.max_running or budget <= 0:
            break
        match = matches.get(id(req)) if cache.num_evictions == evictions else None
        prefix, node = match if match is not None else cache.match(req, match_limit(req))
        if cache.tree is not None and shares_uncached_prefix(req, len(prefix), step):
            continue
        extend = req.fill_len - len(prefix)
        # without chunking the first request goes whole even past max_prefill_tokens
        take = extend if limits.chunk_size is None and not step else min(extend, budget)
        if limits.chunk_size is None and take < extend:
            break
        if whole and take < extend:
            continue
        if not cache.admit(req, prefix, node):
            break
        reserve += min(req.remaining_new_tokens, RESERVE_CLIP) * new_token_ratio
        slots = None
        if not (step or running) or cache.available() >= take + reserve:
            slots = cache.alloc(take)
        if slots is None:
            cache.release(req, insert=False)
            break
        if not req.admitted_once:
            req.admitted_once, req.cached_tokens = True, len(prefix)
        out.reqs.append(req)
        cache.assign(req, slots)
        step.append(req)
        budget -= take
        if take < extend:
            out.chunked = req
            break
    return out
