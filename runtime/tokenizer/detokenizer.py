"""Incremental detokenization for streaming: text deltas that never split a UTF-8 character.

Each step decodes only a short window of recent tokens (vLLM-style offsets): ``prefix_offset`` marks
where the window starts and ``read_offset`` where the already-emitted text ends inside it. Decoding
the window with and without the new tokens and taking the difference keeps tokenizer-specific
spacing rules (e.g. SentencePiece's leading space) identical to a full decode.

    ids:  [ ... emitted ... | prefix window | new, not yet emitted ]
                            ^prefix_offset  ^read_offset          ^len(ids)
"""

from __future__ import annotations

from collections.abc import Collection

from radixlm.runtime.tokenizer.tokenizer import Tokenizer

_REPLACEMENT = "\ufffd"
# A UTF-8 character has at most 4 bytes, so a window that still ends in U+FFFD after this many
# pending tokens holds genuinely invalid bytes; it is emitted as U+FFFD, as a full decode would show.
_MAX_PENDING_TOKENS = 8
# Tokens of already-emitted context decoded with each step (for spacing rules at the boundary).
_CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    """Turn a growing token sequence into text deltas.

    ``step(new_ids)`` returns the text the new ids complete; ``finish()`` flushes whatever is held
    back. The deltas concatenate to the text the output ids add to the prompt's,
    ``decode(prompt_ids + output_ids)[len(decode(prompt_ids)):]``, which for byte-level BPE (and a
    prompt ending on a character boundary) is ``decode(output_ids)``. ``prompt_ids`` are never emitted.
    """

    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int] | None = None,
                 skip_special_tokens: bool = True, keep: Collection[int] = ()):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.keep = frozenset(keep)  # special tokens decoded even when skipping them (format markers)
        self._ids: list[int] = list(prompt_ids or [])
        self._num_prompt = len(self._ids)
        self.read_offset = len(self._ids)
        self.prefix_offset = max(self.read_offset - _CONTEXT_TOKENS, 0)
        self._pieces: list[str] = []

    def fresh(self) -> IncrementalDetokenizer:
        """A new detokenizer with the same settings and no ids (to decode a changed output anew)."""
        return type(self)(self.tokenizer, skip_special_tokens=self.skip_special_tokens, keep=self.keep)

    @property
    def output_ids(self) -> list[int]:
        return self._ids[self._num_prompt:]

    @property
    def text(self) -> str:
        """All text emitted so far."""
        return "".join(self._pieces)

    def _decode(self, start: int, end: int) -> str:
        return self.tokenizer.decode(self._ids[start:end], skip_special_tokens=self.skip_special_tokens,
                                     keep=self.keep)

    def step(self, new_ids: list[int]) -> str:
        """Append ``new_ids`` and return the newly completed text ("" while a character is incomplete)."""
        self._ids.extend(int(i) for i in new_ids)
        prefix_text = self._decode(self.prefix_offset, self.read_offset)
        full_text = self._decode(self.prefix_offset, len(self._ids))
        pending = len(self._ids) - self.read_offset
        if len(full_text) <= len(prefix_text):
            if not full_text.endswith(_REPLACEMENT):
                self.read_offset = len(self._ids)  # only skipped (special) tokens: nothing to hold
            return ""
        if full_text.endswith(_REPLACEMENT) and pending < _MAX_PENDING_TOKENS:
            return ""  # the last token(s) end inside a multi-byte character; wait for the rest
        delta = full_text[len(prefix_text):]
        self.prefix_offset = self.read_offset
        self.read_offset = len(self._ids)
        self._pieces.append(delta)
        return delta

    def finish(self) -> str:
        """Flush held-back text (an unfinished character becomes U+FFFD) and return it."""
        prefix_text = self._decode(self.prefix_offset, self.read_offset)
        full_text = self._decode(self.prefix_offset, len(self._ids))
        delta = full_text[len(prefix_text):]
        self.prefix_offset = self.read_offset
        self.read_offset = len(self._ids)
        self._pieces.append(delta)
        return delta
