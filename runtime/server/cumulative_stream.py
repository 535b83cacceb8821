"""SGLang's default ``/generate`` streaming: each chunk carries everything so far, not the delta.

The engine streams deltas (``text`` and ``output_ids`` new since the last chunk, logprob lists
for the new tokens only). SGLang's server sends, unless ``--incremental-streaming-output``, the
whole text so far, all output ids so far and the logprob lists so far in every chunk, and its
client (``sgl.RuntimeEndpoint``) slices the new text off itself. :class:`CumulativeStream` turns
one request's deltas into those chunks.
"""

from __future__ import annotations

from typing import Any

# meta_info lists that grow with every chunk; prompt logprobs come once and are repeated after
_GROWING = ("output_token_logprobs", "output_top_logprobs")
_ONCE = ("input_token_logprobs", "input_top_logprobs")


class CumulativeStream:
    """The running totals of one streamed request."""

    def __init__(self) -> None:
        self.text = ""
        self.output_ids: list[int] = []
        self.lists: dict[str, list] = {}
        self.once: dict[str, Any] = {}

    def add(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """The cumulative chunk for the engine's delta ``chunk``."""
        self.text += chunk.get("text") or ""
        self.output_ids.extend(chunk.get("output_ids") or [])
        meta = dict(chunk.get("meta_info") or {})
        for key in _GROWING:
            if key in meta:
                self.lists.setdefault(key, []).extend(meta[key] or [])
                meta[key] = list(self.lists[key])
        for key in _ONCE:
            if key in meta:
                self.once[key] = meta[key]
            elif key in self.once:
                meta[key] = self.once[key]
        return {**chunk, "text": self.text, "output_ids": list(self.output_ids), "meta_info": meta}
