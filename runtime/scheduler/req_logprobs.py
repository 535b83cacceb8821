"""``LogprobState``: what a request asked for in logprobs and what it has collected (no torch).

Prompt logprobs cover positions ``start_len .. prompt_len - 1``; the first entry is always None
(no token predicts position ``start_len`` inside the returned span), as in SGLang. They are
computed once: a retracted request that had not finished them starts over, one that had keeps
them. Output logprobs are one entry per output token; a token spliced in by jump-forward was never
sampled and gets None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Top = list[tuple[float, int]]  # [(logprob, token_id), ...], best first


@dataclass
class LogprobState:
    """Logprob request options and the collected values."""

    return_logprob: bool = False
    start_len: int = 0  # first prompt position with a logprob (== prompt_len: none wanted)
    top_num: int = 0
    input_token: list[float | None] = field(default_factory=list)
    input_top: list[Top | None] = field(default_factory=list)
    input_done: bool = False
    output_token: list[float | None] = field(default_factory=list)
    output_top: list[Top] = field(default_factory=list)

    def wants_input(self, prompt_len: int) -> bool:
        """Prompt logprobs are still to compute."""
        return self.return_logprob and self.start_len < prompt_len and not self.input_done

    def add_input(self, logprobs: list[float], tops: list[Top] | None) -> None:
        """Append one step's prompt logprobs (after the None entry that opens the span)."""
        self._open_input()
        self.input_token.extend(logprobs)
        if tops is not None:
            self.input_top.extend(t[:self.top_num] for t in tops)

    def finish_input(self, wanted: bool) -> None:
        """The prompt is computed: close the prompt logprobs (``wanted``: they were asked for)."""
        if wanted:
            self._open_input()  # a span of one position (start_len == prompt_len - 1) has only the None
        self.input_done = True

    def add_output(self, logprob: float, top: Top) -> None:
        if self.return_logprob:
            self.output_token.append(logprob)
            self.output_top.append(top[:self.top_num])

    def add_unscored(self, num: int) -> None:
        """``num`` output tokens the model did not score (a budget close's completion)."""
        if self.return_logprob:
            self.output_token.extend([None] * num)
            self.output_top.extend([] for _ in range(num))

    def restart_input(self) -> None:
        """After a retraction: unfinished prompt logprobs are computed again from the start."""
        if not self.input_done:
            self.input_token, self.input_top = [], []

    def _open_input(self) -> None:
        if not self.input_token:
            self.input_token.append(None)
            self.input_top.append(None)
