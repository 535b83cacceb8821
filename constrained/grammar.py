"""``CompiledGrammar`` (immutable, shared, cached) and ``GrammarMatcher`` (a cheap per-request
cursor over it)."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import outlines_core
import torch
from radixlm.constrained.compile_job import build_index
from radixlm.constrained.vocab import TokenizerVocab

# Bytes that never occur in UTF-8 text (and NUL, the sentinel): no byte token needed for them.
_NON_UTF8 = frozenset([0x00, 0xC0, 0xC1] + list(range(0xF5, 0x100)))
_MAX_FORCED_BYTES = 4096


class CompiledGrammar:
    """A regex compiled against one vocabulary: the outlines-core ``Index`` plus per-state caches.

    Immutable once built and safe to share between requests and threads. ``kind`` and ``spec``
    are the constraint it came from (``validate_output`` checks a final text against them),
    ``relaxed`` lists the schema keywords relaxed with ``strict=False`` (as JSON pointers);
    ``notes`` the restrictions applied to fit a large schema into one automaton.
    """

    def __init__(self, vocab: TokenizerVocab, regex: str, kind: str, spec: Any,
                 relaxed: list[str] | None = None, notes: list[str] | None = None, index: Any = None) -> None:
        self.vocab = vocab
        self.regex = regex
        self.kind = kind
        self.spec = spec
        self.relaxed = list(relaxed or [])
        self.notes = list(notes or [])
        # ``index``: one built elsewhere (a compile worker process) for this regex and vocabulary.
        self.index = build_index(regex, vocab, kind) if index is None else index
        self.initial_state: int = self.index.get_initial_state()
        self._eos = vocab.eos_token_ids[0]
        self._final: dict[int, bool] = {}
        self._probe = [(b, t) for b, t in enumerate(vocab.byte_tokens) if t >= 0]
        self._can_walk_bytes = all(t >= 0 for b, t in enumerate(vocab.byte_tokens) if b not in _NON_UTF8)
        self._forced: dict[int, str] = {}
        self._dead_end: dict[int, bool] = {}

    def matcher(self) -> GrammarMatcher:
        """A fresh cursor at the start of the grammar."""
        return GrammarMatcher(self)

    def is_final(self, state: int) -> bool:
        """Whether the text so far is complete (EOS allowed)."""
        final = self._final.get(state)
        if final is None:
            final = self._final[state] = self.index.get_next_state(state, self._eos) is not None
        return final

    def next_state(self, state: int, token_id: int) -> int | None:
        """The state after ``token_id`` (a non-EOS token), or None if it is not allowed."""
        if not 0 <= token_id < len(self.vocab.token_bytes) or self.vocab.token_bytes[token_id] is None:
            return None
        return self.index.get_next_state(state, token_id)

    def is_dead_end(self, state: int) -> bool:
        """True when no token but EOS can follow ``state`` (cached)."""
        if state not in self._dead_end:
            if self._can_walk_bytes:
                live = any(self.index.get_next_state(state, t) is not None for _, t in self._probe)
            else:
                live = any(t not in self.vocab.eos_token_ids for t in self.index.get_allowed_tokens(state))
            self._dead_end[state] = not live
        return self._dead_end[state]

    def forced_string(self, state: int) -> str:
        """The longest text every valid continuation from ``state`` starts with (cached per state).

        Walks the grammar one byte at a time through single-byte tokens while exactly one byte is
        possible and the state is not accepting. Empty when the vocabulary lacks byte tokens.
        """
        cached = self._forced.get(state)
        if cached is not None:
            return cached
        out = bytearray()
        s = state
        while self._can_walk_bytes and not self.is_final(s) and len(out) < _MAX_FORCED_BYTES:
            nexts = []
            for b, t in self._probe:
                ns = self.index.get_next_state(s, t)
                if ns is not None:
                    nexts.append((b, ns))
                    if len(nexts) > 1:
                        break
            if len(nexts) != 1:
                break
            out.append(nexts[0][0])
            s = nexts[0][1]
        text = _decode_prefix(bytes(out))
        self._forced[state] = text
        return text

    def matches(self, text: str) -> bool:
        """Whether ``text`` is a complete sentence of the grammar."""
        if not self._can_walk_bytes:
            return re.fullmatch(self.regex, text) is not None
        s: int | None = self.initial_state
        for b in text.encode("utf-8"):
            s = self.index.get_next_state(s, self.vocab.byte_tokens[b])
            if s is None:
                return False
        return self.is_final(s)

    def validate_output(self, text: str) -> list[str]:
        """Violations of the original constraint by a final output (empty list: valid).

        For JSON schemas this is a full ``jsonschema`` validation (formats included), which is what
        the engine reports in ``meta_info["constraint_violations"]`` when ``strict=False``.
        """
        if self.kind == "choices":
            return [] if text in self.spec else [f"output is not one of the {len(self.spec)} choices"]
        if self.kind == "regex":
            return [] if self.matches(text) else ["output does not match the regex"]
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            return [f"output is not valid JSON: {e}"]
        if self.kind == "json_object":
            return [] if isinstance(value, dict) else ["output is not a JSON object"]
        cls = jsonschema.validators.validator_for(self.spec)
        validator = cls(self.spec, format_checker=cls.FORMAT_CHECKER)
        return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(value)]


def _decode_prefix(data: bytes) -> str:
    for cut in range(min(4, len(data) + 1)):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


class GrammarMatcher:
    """Per-request cursor: which tokens may come next, given the tokens accepted so far.

    ``accept_token`` advances (or returns False and changes nothing); ``rollback(n)`` undoes the
    last n accepted tokens (EOS included); ``copy()`` forks the cursor; ``fill_mask`` writes the
    allowed-token bitmask. ``is_terminated()`` is True once EOS was accepted, or when the state
    is accepting and nothing but EOS can follow (the engine can stop the request right there).
    """

    def __init__(self, grammar: CompiledGrammar) -> None:
        self.grammar = grammar
        self._guide = outlines_core.Guide(grammar.index)
        self._states: list[int] = [grammar.initial_state]
        self._tokens: list[int] = []
        self._eos_accepted = False

    @property
    def state(self) -> int:
        return self._states[-1]

    @property
    def num_accepted(self) -> int:
        return len(self._tokens)

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) when the token is not allowed here."""
        if self._eos_accepted:
            return False
        if token_id in self.grammar.vocab.eos_token_ids:
            if not self.grammar.is_final(self.state):
                return False
            self._eos_accepted = True
        else:
            nxt = self.grammar.next_state(self.state, token_id)
            if nxt is None:
                return False
            self._guide.advance(token_id, return_tokens=False)
            self._states.append(nxt)
        self._tokens.append(token_id)
        return True

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens."""
        if not 0 <= n <= len(self._tokens):
            raise ValueError(f"cannot roll back {n} tokens: {len(self._tokens)} accepted")
        if n == 0:
            return
        del self._tokens[-n:]
        if self._eos_accepted:
            self._eos_accepted = False
            n -= 1
        if n:
            del self._states[-n:]
            if n <= self._guide.get_allowed_rollback():
                self._guide.rollback_state(n)
            else:
                self._replay()

    def _replay(self) -> None:
        self._guide = outlines_core.Guide(self.grammar.index)
        eos = self.grammar.vocab.eos_token_ids
        for t in self._tokens:
            if t not in eos:
                self._guide.advance(t, return_tokens=False)

    def copy(self) -> GrammarMatcher:
        """An independent cursor at the same position (shares the compiled grammar)."""
        other = GrammarMatcher.__new__(GrammarMatcher)
        other.grammar = self.grammar
        other._states = list(self._states)
        other._tokens = list(self._tokens)
        other._eos_accepted = self._eos_accepted
        other._replay()
        return other

    def is_terminated(self) -> bool:
        if self._eos_accepted:
            return True
        return self.grammar.is_final(self.state) and self.grammar.is_dead_end(self.state)

    def is_accepting(self) -> bool:
        """Whether the text so far is a complete sentence (EOS allowed now)."""
        return self._eos_accepted or self.grammar.is_final(self.state)

    def forced_continuation(self) -> str:
        """Text every valid continuation starts with (empty in accepting states)."""
        if self._eos_accepted:
            return ""
        return self.grammar.forced_string(self.state)

    def fill_mask(self, bitmask_row: torch.Tensor) -> None:
        """Write the allowed tokens into ``bitmask_row`` (int32, contiguous, CPU,
        ``[ceil(vocab_size / 32)]``; bit ``i % 32`` of word ``i // 32`` set = token i allowed)."""
        words = self.grammar.vocab.mask_words
        if (bitmask_row.dtype != torch.int32 or bitmask_row.device.type != "cpu"
                or not bitmask_row.is_contiguous() or bitmask_row.numel() != words):
            raise ValueError(f"bitmask_row must be a contiguous CPU int32 tensor of {words} elements, got "
                             f"{bitmask_row.dtype} {tuple(bitmask_row.shape)} on {bitmask_row.device}")
        if self._eos_accepted:
            bitmask_row.zero_()
        else:
            # EOS ids are the sentinel's tokens: set exactly in accepting states.
            self._guide.write_mask_into(bitmask_row.data_ptr(), words, 4)
