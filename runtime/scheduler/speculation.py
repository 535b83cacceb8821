"""Speculative decoding's proposer: draft tokens the model then verifies (plain Python, no torch).

A draft is a guess at the next tokens of a running request. The decode step extends the last
token and the ``k`` draft tokens in one forward (``batch.build_verify_batch``); the model runner
samples every position under the grammar's mask at that position and keeps the drafts up to the
first one the model would not have produced, plus the model's own token after them. What is kept
is exactly what decoding one token a step would have produced (greedy), or has its distribution
(sampling): drafting changes speed, never the output. Sources, in order:

1. **the grammar** (``Constraint.draft``): the text it forces, in the model's tokenization;
2. **the radix tree** (``RadixCache.continuation``): what earlier requests with this whole prefix
   went on with (SGLang's NGRAM keeps a cache of such continuations);
3. **the request's own tokens**: the longest recent n-gram (``MIN_NGRAM``..``MAX_NGRAM``) that
   ends the text so far and occurred before proposes what followed it (prompt lookup);
4. **the prompt's text**: the longest end of the output's text found in the prompt's text proposes
   the text after it, tokenized. Text copied from the prompt into JSON is tokenized otherwise than
   in the prompt (``"Lucas`` is ``"``, ``Luc``, ``as`` where the prose had `` Lucas``), so
   token n-grams miss it where characters match.

A draft stops at an end token (EOS, ``stop_token_ids``) and at the first token the grammar refuses.

Adaptive length, by cost: each request estimates how often the model keeps its draft tokens
(``p``, from what it kept and where it stopped), and the drafter measures what a step costs
(``StepCost``: a plain decode step, and each draft row more). A draft of ``k`` tokens yields
``(1 - p^(k+1)) / (1 - p)`` tokens for ``1 + r k`` times a plain step's time (``r``: a draft row's
cost over a plain step's); the drafter proposes the ``k`` with the most tokens per unit of time, and
none when no ``k`` beats a plain step by ``MIN_GAIN``, so free text the drafts miss is not slowed
down. On a GPU or a memory-bound CPU step a row costs little (``r`` small: long drafts); where each
row is compute (a small CPU), drafts are proposed only while the model keeps most of them.
Speculation steps aside where it cannot pay or could change the
output: batches of more than ``max_batch_size`` running requests (a forward is then
compute-bound, and extra rows cost what they save) and requests with penalties or
``min_new_tokens`` (their logits depend on the tokens before each position). Sampled requests
draft too: verification samples each position as a decode step would, so a seeded request's
output is the same with and without drafts. Requests that ask for
logprobs are verified like any other: each kept token's logprobs come from its own row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from radixlm.radix_cache import RadixCache
from radixlm.runtime.scheduler.req import Req

MIN_NGRAM = 2
MAX_NGRAM = 4
MIN_GAIN = 0.05  # a draft must promise this much more than a plain step's tokens per unit of time
PRIOR_ROW_COST = 0.1  # a draft row's cost over a plain step's, until steps were measured
PRIOR_KEPT, PRIOR_WEIGHT = 0.6, 2.0  # the acceptance a request starts from, weighed as 2 observations
FORCED_KEPT = 0.9  # text the grammar forces is kept but where the model spells its end otherwise
EMA = 0.2  # weight of the newest measured step
TEXT_TAIL_TOKENS = 8  # the output's last tokens whose text is looked up in the prompt's text
MIN_TEXT_MATCH = 5  # characters a text match must have
CHARS_PER_TOKEN = 8  # prompt text taken per draft token wanted (then tokenized and cut)
# rows one verify step may carry: up to this many, the GGUF kernels compute each row exactly as a
# one-row decode step does (kernels/csrc/gguf_matmul.c DECODE_MAX_M), and read the weights once
VERIFY_MAX_ROWS = 16


class TextCodec(Protocol):
    """What text lookup uses of the tokenizer."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...


@dataclass(frozen=True)
class SpeculativeConfig:
    """What the scheduler drafts: at most ``num_draft_tokens`` a request a step, while at most
    ``max_batch_size`` requests decode; ``grammar_drafts`` False proposes no forced text (the
    server's ``--enable-jump-forward``); ``row_cost`` fixes what a draft row costs instead of
    measuring it (drafting then does not depend on the machine's load). ``num_draft_tokens == 0``
    turns speculation off."""

    num_draft_tokens: int = 0
    max_batch_size: int = 4
    grammar_drafts: bool = True
    row_cost: float | None = None  # a draft row's cost over a plain step's; None: measured (StepCost)

    @property
    def enabled(self) -> bool:
        return self.num_draft_tokens > 0


@dataclass
class StepCost:
    """What decode steps cost, measured: a plain step's seconds by its number of requests, and the
    seconds each draft row adds (exponential moving averages)."""

    plain: dict[int, float] = field(default_factory=dict)
    per_row: float | None = None

    def observe(self, requests: int, rows: int, seconds: float) -> None:
        """A decode step of ``requests`` requests and ``rows`` rows took ``seconds``."""
        if rows == requests:
            self.plain[requests] = _ema(self.plain.get(requests), seconds)
        elif requests in self.plain:
            extra = max(seconds - self.plain[requests], 0.0) / (rows - requests)
            self.per_row = _ema(self.per_row, extra)

    def ratio(self, requests: int) -> float:
        """A draft row's cost over a plain step's, at ``requests`` requests."""
        plain = self.plain.get(requests)
        if plain is None or self.per_row is None or plain <= 0:
            return PRIOR_ROW_COST
        return self.per_row / plain


def _ema(old: float | None, new: float) -> float:
    return new if old is None else (1 - EMA) * old + EMA * new


def best_length(kept: float, ratio: float, longest: int) -> int:
    """The draft length (0 .. ``longest``) with the most expected tokens per unit of time, when a
    draft token is kept with probability ``kept`` and a draft row costs ``ratio`` plain steps; 0
    unless it beats a plain step by ``MIN_GAIN``."""
    best, best_value, expected, power = 0, 1.0 + MIN_GAIN, 1.0, 1.0
    for k in range(1, longest + 1):
        power *= kept
        expected += power  # 1 + p + ... + p^k
        value = expected / (1.0 + ratio * k)
        if value > best_value:
            best, best_value = k, value
    return best


@dataclass
class DraftState:
    """One request's drafting state: its n-gram index, what it proposed and what the model kept."""

    indexed: int = 0  # positions of fill_ids whose n-grams are in ``index``
    index: dict[tuple[int, ...], int] = field(default_factory=dict)  # n-gram -> position after it
    proposed: list[int] = field(default_factory=list)  # this step's draft
    grammar_len: int = 0  # how many leading draft tokens the grammar forced
    kept: int = 0  # draft tokens the model kept so far
    missed: int = 0  # steps whose draft the model stopped short of
    prompt_text: str | None = None  # the prompt decoded, for text lookup (made on first use)

    @property
    def keep_rate(self) -> float:
        """The estimated probability that the model keeps the next draft token."""
        return (self.kept + PRIOR_KEPT * PRIOR_WEIGHT) / (self.kept + self.missed + PRIOR_WEIGHT)


def spec_blocker(req: Req) -> str | None:
    """Why drafts could change ``req``'s output (None: they cannot)."""
    p = req.params
    if p.repetition_penalty != 1.0 or p.frequency_penalty or p.presence_penalty:
        return "penalties depend on the tokens before each position"
    if req.output_len < p.min_new_tokens:
        return "min_new_tokens masks depend on the output length"
    return None


class Drafter:
    """Proposes each running request's draft (see the module docstring); the scheduler allocates
    its slots and keeps the accounts."""

    def __init__(self, config: SpeculativeConfig, tree: RadixCache | None, end_ids: frozenset[int],
                 codec: TextCodec | None = None) -> None:
        self.config = config
        self.tree = tree
        self.end_ids = end_ids  # EOS ids: a draft stops before one
        self.codec = codec  # the tokenizer, for text lookup (None: no text lookup)
        self.cost = StepCost()
        self.steps = 0  # verify steps run
        self.proposed_tokens = 0
        self.accepted_tokens = 0

    def active(self, num_running: int) -> bool:
        """Whether a decode step of ``num_running`` requests drafts at all."""
        return self.config.enabled and num_running <= self.config.max_batch_size

    def propose(self, req: Req, room: int, batch_size: int = 1) -> list[int]:
        """``req``'s draft for this step: at most ``room`` tokens (what its budget and context
        leave after the token the step samples anyway), as long as pays in a step of
        ``batch_size`` requests; empty when nothing is worth proposing."""
        state = req.drafts
        if state is None:
            state = req.drafts = DraftState()
        state.proposed, state.grammar_len = [], 0
        if spec_blocker(req) is not None:
            return []
        constraint = req.constraint
        fixed = self.config.row_cost
        longest = min(self.config.num_draft_tokens, room)
        ratio = fixed if fixed is not None else self.cost.ratio(batch_size)
        if longest <= 0:
            return []
        draft: list[int] = []
        if constraint is not None and self.config.grammar_drafts and not req.params.disable_jump_forward:
            draft = constraint.draft(best_length(FORCED_KEPT, ratio, longest))
            state.grammar_len = len(draft)
        k = max(len(draft), best_length(state.keep_rate, ratio, longest))
        if len(draft) < k:
            draft += self._lookup(req, draft, k - len(draft))
        draft = self._cut(req, draft)
        if constraint is not None and len(draft) > state.grammar_len:
            draft = draft[:constraint.validate(draft)]
        state.proposed = draft
        return draft

    def record(self, req: Req, accepted: int) -> None:
        """The step verified ``req.drafts.proposed`` and kept its first ``accepted`` tokens."""
        state = req.drafts
        proposed = len(state.proposed)
        if not proposed:
            return
        self.steps += 1
        self.proposed_tokens += proposed
        self.accepted_tokens += accepted
        req.spec_verify_ct += 1
        req.spec_draft_tokens += proposed
        req.spec_accepted_tokens += accepted
        req.forced_tokens += min(accepted, state.grammar_len)
        state.kept += accepted
        state.missed += accepted < proposed

    def origin(self, req: Req, j: int) -> str:
        """The origin code of the ``j``-th accepted draft token (``TokenOrigins``, ``req.py``)."""
        return "forced" if j < req.drafts.grammar_len else "drafted"

    # ------------------------------------------------------------------ sources

    def _lookup(self, req: Req, head: list[int], k: int) -> list[int]:
        """What follows ``fill_ids + head``: the radix tree's continuation, else the n-gram match,
        else the prompt text's."""
        if self.tree is not None and not head:
            found = self.tree.continuation(req.fill_ids, req.extra_key, k)
            if found:
                return found
        return self._ngram(req, head, k) or self._text(req, head, k)

    def _text(self, req: Req, head: list[int], k: int) -> list[int]:
        """Text lookup: the longest end (``MIN_TEXT_MATCH`` characters or more) of the last
        ``TEXT_TAIL_TOKENS`` tokens' text that occurs in the prompt's text proposes the text after its
        latest occurrence, tokenized (its last token dropped where the text was cut, as it may be
        part of a longer one)."""
        if self.codec is None or req.output_len == 0:
            return []
        state = req.drafts
        if state.prompt_text is None:
            state.prompt_text = self.codec.decode(req.origin_input_ids)
        text, total = state.prompt_text, req.fill_len
        tail = self.codec.decode(req.fill_slice(max(total - TEXT_TAIL_TOKENS, 0), total) + head)
        lo, hi, pos = MIN_TEXT_MATCH, len(tail), -1  # a suffix that occurs has every shorter one occur
        while lo <= hi:
            mid = (lo + hi) // 2
            found = text.rfind(tail[-mid:])
            if found >= 0:
                lo, pos, n = mid + 1, found, mid
            else:
                hi = mid - 1
        if pos < 0:
            return []
        start = pos + n
        piece = text[start:start + CHARS_PER_TOKEN * (k + 1)]
        ids = list(self.codec.encode(piece, add_special_tokens=False))
        if start + len(piece) < len(text):
            ids = ids[:-1]
        return ids[:k]

    def _ngram(self, req: Req, head: list[int], k: int) -> list[int]:
        """Prompt lookup: the most recent earlier occurrence of the longest n-gram that ends
        ``fill_ids + head`` proposes the tokens after it; a match that runs into the end of the
        text repeats with its period (a repeated pattern goes on repeating)."""
        state = req.drafts
        total = req.fill_len
        self._index(req, state, total)
        tail = req.fill_slice(max(total - MAX_NGRAM, 0), total) + head
        for n in range(min(MAX_NGRAM, len(tail)), MIN_NGRAM - 1, -1):
            pos = state.index.get(tuple(tail[len(tail) - n:]))
            if pos is None:
                continue
            found = req.fill_slice(pos, min(pos + k, total))
            period = total - pos
            while len(found) < k:
                found.append(found[len(found) - period])
            return found
        return []

    @staticmethod
    def _index(req: Req, state: DraftState, total: int) -> None:
        """Index the n-grams of ``fill_ids`` that now have a following token (each n-gram maps to
        the position after its latest occurrence)."""
        start = state.indexed
        if start >= total - 1:
            return
        lo = max(start - MAX_NGRAM + 1, 0)
        ids = req.fill_slice(lo, total)
        for end in range(start + 1, total):  # an n-gram ending before position `end`
            for n in range(MIN_NGRAM, MAX_NGRAM + 1):
                if end - n >= lo:
                    state.index[tuple(ids[end - n - lo:end - lo])] = end
        state.indexed = total - 1

    def _cut(self, req: Req, draft: list[int]) -> list[int]:
        """The draft up to its first end token (EOS or a stop token id)."""
        stops = req.params.stop_token_ids
        for j, token in enumerate(draft):
            if token in self.end_ids or (stops and token in stops):
                return draft[:j]
        return draft

    def stats(self) -> dict[str, float]:
        """Totals for ``/metrics`` and ``get_stats``."""
        rate = self.accepted_tokens / self.proposed_tokens if self.proposed_tokens else 0.0
        length = self.accepted_tokens / self.steps if self.steps else 0.0
        return {"spec_verify_steps": self.steps, "spec_draft_tokens": self.proposed_tokens,
                "spec_accepted_tokens": self.accepted_tokens, "spec_accept_rate": rate,
                "spec_accept_length": length}
