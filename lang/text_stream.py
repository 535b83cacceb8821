"""Reading a running state's text (or one variable) as it grows, with per-chunk meta info.

The interpreter appends each streamed chunk's text and records its ``meta_info`` in the
executor's ``stream_log`` under the same lock, so a reader sees text and meta info consistently.
Logprob lists in a chunk's meta info cover only that chunk's tokens; chunks whose meta info
arrived without new text are merged into the next piece a reader yields (as SGLang does), so no
token's logprob is lost.
"""

from __future__ import annotations

from typing import Any

# Meta-info lists that a stream delivers piecewise (SGLang's incremental streaming keys).
INCREMENTAL_KEYS = ("output_token_logprobs", "output_top_logprobs", "output_token_ids_logprobs")


def merge_stream_meta(pending: dict | None, meta: dict | None) -> dict | None:
    """``meta`` on top of ``pending``: the newest value of each field, incremental lists joined."""
    if pending is None:
        return dict(meta) if meta is not None else None
    if meta is None:
        return pending
    merged = {**pending, **meta}
    for key in INCREMENTAL_KEYS:
        if key in pending or key in meta:
            merged[key] = list(pending.get(key) or []) + list(meta.get(key) or [])
    return merged


class TextReader:
    """Successive pieces of the state's text (``var=None``) or of variable ``var``."""

    def __init__(self, executor: Any, var: str | None):
        self.ex = executor
        self.var = var
        self.pos = 0  # characters already returned
        self.log_pos = 0  # stream_log entries already merged into a returned piece
        self.saw_chunks = False

    def next_piece(self) -> tuple[str, dict | None, bool]:
        """Wait for new text; return (text, meta info of the chunks in it, whether the source is done).

        At the end the text may be empty while meta info (e.g. the finish reason) is still pending.
        """
        ex = self.ex
        with ex.cond:
            while True:
                state = self._current()
                if state is not None:
                    current, done = state
                    if len(current) > self.pos or done:
                        piece, self.pos = current[self.pos:], len(current)
                        return piece, self._take_meta(done), done
                ex.cond.wait()

    def _current(self) -> tuple[str, bool] | None:
        """(text so far, done), or None while ``var`` is not known yet; KeyError once it never will be."""
        ex = self.ex
        if self.var is None:
            return ex.text_, ex.finished or ex.error_ is not None
        event = ex.events.get(self.var)
        if event is None and self.var not in ex.variables:
            if ex.finished or ex.error_ is not None:
                raise KeyError(f"unknown variable {self.var!r}")
            return None
        done = event is None or event.is_set()
        current = ex.variables.get(self.var, "") if done else ex.partial.get(self.var, "")
        if isinstance(current, list):  # gen(n>1): the text continues with the first sample
            current = current[0] if current else ""
        return (current if isinstance(current, str) else str(current)), done

    def _take_meta(self, done: bool) -> dict | None:
        merged = None
        log = self.ex.stream_log
        for name, meta in log[self.log_pos:]:
            if self.var is None or name == self.var:
                merged = merge_stream_meta(merged, meta)
                self.saw_chunks = True
        self.log_pos = len(log)
        if merged is None and done and not self.saw_chunks and self.var is not None:
            # The gen ran without streaming: its whole meta info comes with its whole value.
            merged = self.ex.meta_info.get(self.var)
        return merged
