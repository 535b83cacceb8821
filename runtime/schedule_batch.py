"""What the scheduler hands the model runner and what comes back (plain lists, no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field

from radixlm.runtime.forward_batch import BatchSpec
from radixlm.runtime.req import Req


@dataclass
class LogprobSpan:
    """Prompt-logprob rows of one request in this step.

    Logit rows ``first_row .. first_row + len(target_ids) - 1`` are the positions
    ``first_pos ..``; row j predicts ``target_ids[j]`` (the prompt token after it).
    """

    req: Req
    first_row: int
    first_pos: int
    target_ids: list[int]


@dataclass
class ScheduledBatch:
    """One step: the requests, the ``BatchSpec`` for the forward, and which logit rows mean what.

    ``sample_reqs[i]`` samples its next token from logit row ``sample_rows[i]``; prompt logprobs
    come from the rows in ``logprob_spans``. ``chunked_req`` is the request (if any) whose prompt
    is still incomplete after this step.
    """

    is_decode: bool
    reqs: list[Req]
    spec: BatchSpec
    sample_reqs: list[Req] = field(default_factory=list)
    sample_rows: list[int] = field(default_factory=list)
    logprob_spans: list[LogprobSpan] = field(default_factory=list)
    chunked_req: Req | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.spec.input_ids)


@dataclass
class BatchResult:
    """The runner's answer, aligned with ``sample_reqs`` and ``logprob_spans``.

    Logprobs are ``log_softmax`` of the model's raw float32 logits (before logit_bias, penalties,
    grammar masks and temperature); top lists are ``[(logprob, token_id), ...]``, best first.
    ``next_token_logprobs`` / ``next_top_logprobs`` are filled for every sampled row when any
    request in the batch asked for logprobs, else empty.
    """

    next_token_ids: list[int]
    next_token_logprobs: list[float] = field(default_factory=list)
    next_top_logprobs: list[list[tuple[float, int]]] = field(default_factory=list)
    input_logprobs: list[list[float]] = field(default_factory=list)
    input_top_logprobs: list[list[list[tuple[float, int]]]] = field(default_factory=list)
    forward_s: float = 0.0  # time in the model forward (for the overhead counters)
