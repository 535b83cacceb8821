"""Admission of waiting requests into one prefill step (plain Python, no torch).

In policy order (``order_waiting``), each candidate's prompt is matched in the radix cache
(never the whole prompt: the last token is always recomputed to get its logits; with prompt
logprobs the match stops at ``logprob_start_len``), the match is locked, and slots are allocated
for the rest, within the step's token budget and the reserve kept for the running requests'
future tokens (``reserve_tokens``, scaled by the scheduler's ``new_token_ratio``). A prompt that
does not fit the budget is cut into a chunk (with chunking on); a request sharing an uncached
prefix with one admitted in this step waits a step to hit the cache instead.

The scheduler owns the queues: ``admit`` only says which requests it admitted and which one it
cut, and the scheduler takes them off its waiting queue.

The waiting queue's order (``schedule_policy``):

- ``fcfs``: arrival order (retracted requests keep their original place).
- ``lpm``: longest cached prefix first, so the requests that reuse the most KV go while it is
  still cached; falls back to ``fcfs`` when more than ``LPM_FALLBACK_QUEUE_LEN`` wait (matching
  every waiting prompt each step would cost more than it saves).
- ``dfs-weight``: a depth-first walk of the prefix trie of the waiting prompts, the heavier
  subtree (more requests) first, so requests sharing a prefix are admitted next to each other and
  the largest group first (SGLang's ``dfs-weight`` without reaching into the radix tree's nodes).

Whatever the policy, admission is fair between callers: the order is interleaved round-robin by
``req.caller`` (one ``generate`` call), keeping the policy's order inside each caller, so a lone
request behind a 10,000-prompt batch waits for one free slot, not for the whole batch.

``mixed_prefill_budget``: how many prompt tokens a mixed step (``--enable-mixed-chunk``) may
prefill next to its decode rows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

from radixlm.radix_cache.radix_cache import common_prefix_len
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.req_cache import ReqCache

RESERVE_CLIP = 4096  # reserve for at most this many future tokens per request
LPM_FALLBACK_QUEUE_LEN = 128
# Requests sharing at least this many not-yet-cached tokens with one admitted in the same step
# wait one step, so that they hit the cache instead of computing the shared part again.
IN_BATCH_PREFIX_THRESHOLD = 32
# A mixed step's prefill keeps at least this share of the budget, however many requests decode.
MIXED_MIN_PREFILL_SHARE = 0.5


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


def order_waiting(waiting: list[Req], policy: str, prefix_len: Callable[[Req], int]) -> list[Req]:
    """The waiting requests in admission order under ``policy``, fair between callers."""
    return interleave_callers(_policy_order(waiting, policy, prefix_len))


def _policy_order(waiting: list[Req], policy: str, prefix_len: Callable[[Req], int]) -> list[Req]:
    if policy == "fcfs" or (policy == "lpm" and len(waiting) > LPM_FALLBACK_QUEUE_LEN):
        return sorted(waiting, key=lambda r: r.arrival)
    if policy == "lpm":
        return sorted(waiting, key=lambda r: (-prefix_len(r), r.arrival))
    if policy == "dfs-weight":
        return dfs_weight_order(waiting)
    raise ValueError(f"schedule_policy must be lpm, dfs-weight or fcfs; got {policy!r}")


def interleave_callers(order: list[Req]) -> list[Req]:
    """Round-robin over callers (in order of their first request in ``order``), keeping each
    caller's own order: one request of each caller, then the second of each, and so on."""
    queues: dict[int, list[Req]] = {}
    for req in order:
        queues.setdefault(req.caller, []).append(req)
    if len(queues) == 1:
        return order
    out: list[Req] = []
    for round_ in itertools.zip_longest(*queues.values()):
        out.extend(r for r in round_ if r is not None)
    return out


def dfs_weight_order(reqs: list[Req]) -> list[Req]:
    """Depth-first over the prompts' prefix trie, heavier subtrees first, ties by arrival."""
    group = sorted(reqs, key=lambda r: (r.fill_ids, r.arrival))
    out: list[Req] = []
    _dfs(group, 0, out)
    return out


def _dfs(group: list[Req], depth: int, out: list[Req]) -> None:
    # `group` is sorted by token ids, so the first and last bound its common prefix.
    while len(group) > 1:
        depth += common_prefix_len(group[0].fill_slice(depth, group[0].fill_len), group[-1].fill_ids, depth)
        ended = [r for r in group if r.fill_len <= depth]
        out.extend(sorted(ended, key=lambda r: r.arrival))
        rest = [r for r in group if r.fill_len > depth]
        subgroups: dict[int, list[Req]] = {}
        for r in rest:
            subgroups.setdefault(r.fill_ids[depth], []).append(r)
        if len(subgroups) <= 1:
            group = rest
            continue
        ranked = sorted(subgroups.values(), key=lambda g: (-len(g), min(r.arrival for r in g)))
        for sub in ranked:
            _dfs(sub, depth + 1, out)
        return
    out.extend(group)


def mixed_prefill_budget(budget: int, num_decode: int) -> int:
    """Prefill tokens of a mixed step that also decodes ``num_decode`` running requests.

    The step's tokens stay within the prefill budget (``chunked_prefill_size``, capped by
    ``max_prefill_tokens``), as in SGLang: the decode rows count first and the prefill gets the
    rest, so a running request's step costs about one chunk whatever the prompt's length. The
    prefill keeps at least ``MIXED_MIN_PREFILL_SHARE`` of the budget even when many requests
    decode (SGLang would prefill nothing then, and starve new arrivals): a mixed step holds at
    most ``max(budget, num_decode + budget / 2)`` tokens.
    """
    return max(budget - num_decode, math.ceil(budget * MIXED_MIN_PREFILL_SHARE))


def shares_uncached_prefix(req: Req, cached_len: int, admitted: list[Req]) -> bool:
    """Whether ``req`` should wait for one of ``admitted`` to put a shared prefix in the cache.

    True when the uncached part of its prompt shares ``IN_BATCH_PREFIX_THRESHOLD`` tokens (or all
    of it but the last token, for short prompts such as the siblings of an ``n > 1`` request)
    with a request that is being prefilled now.
    """
    extend = req.fill_len - cached_len
    need = min(IN_BATCH_PREFIX_THRESHOLD, max(extend - 1, 1))
    end = cached_len + need  # the common prefix must reach this far
    window = req.fill_slice(cached_len, end)
    for other in admitted:
        # the short window first: it rejects most candidates without touching the long prefix
        if other.fill_len >= end and other.fill_slice(cached_len, end) == window \
                and other.fill_slice(0, cached_len) == req.fill_slice(0, cached_len):
            return True
    return False
