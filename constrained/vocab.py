"""``TokenizerVocab``: the byte string of every token and the outlines-core ``Vocabulary``, built
once per tokenizer and shared by every grammar compiled for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import outlines_core

SENTINEL = b"\x00"


def _spare_id(raw: Sequence[bytes | None], table: tuple, eos: set) -> int:
    """An id outlines may use as its own EOS: it is only allowed past the sentinel, a state no
    matcher ever enters, so any id that is never generated inside a grammar will do."""
    for i, b in enumerate(table):
        if b is None and i not in eos:
            return i
    raise ValueError("the vocabulary needs one token id besides EOS that grammars never produce "
                     "(a special token, or a token containing a NUL byte)")


@dataclass(frozen=True, eq=False)
class TokenizerVocab:
    """Token bytes (None for special tokens) and the outlines vocabulary over them.

    ``vocab_size`` is the model's logit width: ids at or past ``len(token_bytes)`` exist only in
    the logits and are never allowed. ``eos_token_ids`` are allowed exactly in accepting states.
    ``byte_tokens[b]`` is the id of the single-byte token ``bytes([b])`` (or -1): jump-forward
    walks the grammar one byte at a time through them.
    """

    token_bytes: tuple[bytes | None, ...]
    eos_token_ids: tuple[int, ...]
    vocab_size: int
    outlines: Any = field(repr=False)
    byte_tokens: tuple[int, ...] = field(repr=False)

    @property
    def mask_words(self) -> int:
        """int32 words per bitmask row: ceil(vocab_size / 32)."""
        return (self.vocab_size + 31) // 32

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, vocab_size: int | None = None) -> TokenizerVocab:
        """Build from a ``radixlm.runtime.engine.tokenizer.Tokenizer`` (``id_to_bytes``, ``vocab_size``,
        ``eos_token_ids``, ``special_token_ids``)."""
        special = set(getattr(tokenizer, "special_token_ids", ()) or ())
        eos = [int(i) for i in tokenizer.eos_token_ids]
        special |= set(eos)
        if hasattr(tokenizer, "all_token_bytes"):
            raw = tokenizer.all_token_bytes()
        else:
            raw = [tokenizer.id_to_bytes(i) for i in range(tokenizer.vocab_size)]
        table = [None if i in special else b for i, b in enumerate(raw)]
        return cls.from_token_bytes(table, eos, vocab_size)

    @classmethod
    def from_token_bytes(
        cls, token_bytes: Sequence[bytes | None], eos_token_ids: Sequence[int], vocab_size: int | None = None
    ) -> TokenizerVocab:
        """Build from an explicit table (index = token id; None = never generated inside a grammar)."""
        if not eos_token_ids:
            raise ValueError("eos_token_ids must name at least one token")
        n = len(token_bytes)
        vocab_size = n if vocab_size is None else int(vocab_size)
        if vocab_size < n:
            raise ValueError(f"vocab_size ({vocab_size}) is smaller than the tokenizer ({n} tokens)")
        bad = [e for e in eos_token_ids if not 0 <= e < n]
        if bad:
            raise ValueError(f"eos_token_ids {bad} are outside the tokenizer's {n} ids")
        eos_set = set(eos_token_ids)
        # NUL never occurs in JSON text: tokens holding it are dropped, and the byte itself is
        # the end-of-text sentinel that the grammar appends to every regex (see grammar.py).
        table = tuple(None if i in eos_set or not b or SENTINEL in b else bytes(b)
                      for i, b in enumerate(token_bytes))
        groups: dict[bytes, list[int]] = {}
        for i, b in enumerate(table):
            if b is not None:
                groups.setdefault(b, []).append(i)
        groups[SENTINEL] = [int(e) for e in eos_token_ids]
        voc = outlines_core.Vocabulary(_spare_id(token_bytes, table, eos_set), groups)
        byte_tokens = [-1] * 256
        for b, ids in groups.items():
            if len(b) == 1 and b != SENTINEL:
                byte_tokens[b[0]] = ids[0]
        return cls(table, tuple(int(e) for e in eos_token_ids), vocab_size, voc, tuple(byte_tokens))
