"""``CompiledGrammar`` (immutable, shared, cached) and ``GrammarMatcher`` (a cheap per-request
cursor over it), on llguidance's matcher: a lazy lexer per lexeme and an Earley parser over them,
so masks are computed as they are needed. It imports no front end: grammars arrive as Lark text
with their checked-path table (``checks/reader.py``'s ``UniquePaths``).

``RuntimeChecks`` is the one seam between ``GrammarMatcher`` and the checks a grammar cannot say
(``uniqueItems`` over free values, runtime-checked object members, counted string lengths). The
matcher holds one (None for grammars without such checks) and knows no check by name: it feeds
each accepted token's bytes (``feed``, one immutable reader state per token), lets it clear the
refused tokens from a mask row (``clear_refused``), and asks it for forced text (``forced``), the
keys a checked object still needs (``required_keys``) and whether a counted string is full
(``at_max_length``). The reader lives in ``checks/``, the mask filters that equal it on every
allowed token in ``masks/``.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import numpy as np
import torch
from radixlm.constrained.checks.reader import UniquePaths
from radixlm.constrained.checks.tracker import UniqueTracker, forced_with_checks, required_keys
from radixlm.constrained.compile.worker import build_core
from radixlm.constrained.decoding.completion import greedy_completion
from radixlm.constrained.masks.duplicate_items import forbid
from radixlm.constrained.masks.members import forbid_members
from radixlm.constrained.masks.string_lengths import forbid_lengths
from radixlm.constrained.vocab import LazyTables, TokenizerVocab

GRAMMAR_BASE_BYTES = 64 << 10  # a grammar's fixed share in the cache's byte count (tables, parser)


class CompiledGrammar:
    """A grammar (Lark text) compiled against one vocabulary.

    Immutable once built and safe to share between requests and threads: each matcher is a copy
    of the one built here. ``kind`` and ``spec`` are the constraint it came from
    (``validate_output`` checks a final text against them); ``relaxed`` lists the schema keywords
    relaxed with ``strict=False`` (as JSON pointers); ``notes`` the restrictions applied.
    ``unique`` locates the ``uniqueItems`` arrays whose duplicates the matchers forbid at runtime,
    the objects whose members they check and the strings whose length they count; ``checks``
    (``RuntimeChecks``) does that checking, None for grammars without any (no overhead;
    ``unique_tracker`` is its reader). The compile path warms it (``backend.warm_start``)
    once built; the constructor computes no mask.
    """

    def __init__(self, vocab: TokenizerVocab, lark: str, kind: str, spec: Any,
                 relaxed: list[str] | None = None, notes: list[str] | None = None,
                 unique: UniquePaths | None = None) -> None:
        self.vocab = vocab
        self.lark = lark
        self.kind = kind
        self.spec = spec
        self.relaxed = list(relaxed or [])
        self.notes = list(notes or [])
        self.compile_s: float | None = None
        self.tables = LazyTables()  # per-grammar tables of the matcher's clients (``decoding``)
        self.unique = unique
        self.checks = RuntimeChecks(unique, vocab) if unique is not None else None
        self.unique_tracker = self.checks.tracker if self.checks is not None else None
        self.matcher_bytes = 0  # the automaton's size as the worker's probe measured it (compile/worker.py)
        self._template = build_core(vocab, lark, kind)

    def nbytes(self) -> int:
        """Estimated memory this grammar holds, for a cache bounded in bytes: the automaton as the
        worker's probe measured it, the Lark text (kept here and parsed by the core) and a fixed
        share for the per-grammar tables and the core's parser."""
        return self.matcher_bytes + 4 * len(self.lark) + GRAMMAR_BASE_BYTES

    def matcher(self) -> GrammarMatcher:
        """A fresh cursor at the start of the grammar."""
        return GrammarMatcher(self, self._template.deep_copy())

    def matches(self, text: str) -> bool:
        """Whether ``text`` is a complete sentence of the grammar."""
        m = self.matcher()
        ids = self.vocab.llg.tokenize_str(text)
        return all(m.accept_token(t) for t in ids) and m.is_accepting()

    def validate_output(self, text: str) -> list[str]:
        """Violations of the original constraint by a final output (empty list: valid).

        For JSON schemas this is a full ``jsonschema`` validation (formats included), which is what
        the engine reports in ``meta_info["constraint_violations"]`` when ``strict=False``.
        """
        if self.kind == "choices":
            return [] if text in self.spec else [f"output is not one of the {len(self.spec)} choices"]
        if self.kind in ("regex", "ebnf"):
            return [] if self.matches(text) else [f"output does not match the {self.kind}"]
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            return [f"output is not valid JSON: {e}"]
        if self.kind == "json_object":
            return [] if isinstance(value, dict) else ["output is not a JSON object"]
        cls = jsonschema.validators.validator_for(self.spec)
        validator = cls(self.spec, format_checker=cls.FORMAT_CHECKER)
        return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(value)]


class GrammarMatcher:
    """Per-request cursor: which tokens may come next, given the tokens accepted so far.

    ``accept_token`` advances (or returns False and changes nothing); ``rollback(n)`` undoes the
    last n accepted tokens (EOS included); ``copy()`` forks the cursor; ``fill_mask`` writes the
    allowed-token bitmask. ``is_terminated()`` is True once EOS was accepted, or when the text is
    complete and nothing but EOS can follow (the engine can stop the request right there).
    """

    def __init__(self, grammar: CompiledGrammar, core: Any) -> None:
        self.grammar = grammar
        self._core = core
        self._eos = frozenset(grammar.vocab.eos_token_ids)
        self._accepted = 0
        self._eos_accepted = False
        self._text = bytearray()  # the accepted tokens' bytes (completions read where they are)
        self._ends: list[int] = []  # len(self._text) after each accepted token
        self._checks = grammar.checks  # None: nothing checked at runtime
        self._states = [self._checks.initial] if self._checks is not None else None  # one per token

    def accepted_bytes(self) -> bytes:
        """The bytes of the tokens accepted so far (EOS adds none)."""
        return bytes(self._text)

    @property
    def num_accepted(self) -> int:
        return self._accepted

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (state unchanged) when the token is not allowed here."""
        if self._eos_accepted:
            return False
        state = self._states[-1] if self._checks is not None else None
        if token_id in self._eos:
            if not self._core.is_accepting():
                return False
            self._eos_accepted = True
        else:
            table = self.grammar.vocab.token_bytes
            if not 0 <= token_id < len(table) or table[token_id] is None:
                return False
            if self._core.try_consume_tokens([token_id]) != 1:
                return False
            if state is not None:
                state = self._checks.feed(state, table[token_id])
                if state is None:  # refused by a runtime check (a duplicate item, a key, a length)
                    self._core.rollback(1)
                    return False
        self._accepted += 1
        if token_id not in self._eos:
            self._text += self.grammar.vocab.token_bytes[token_id]
        self._ends.append(len(self._text))
        if state is not None:
            self._states.append(state)
        return True

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` accepted tokens."""
        if not 0 <= n <= self._accepted:
            raise ValueError(f"cannot roll back {n} tokens: {self._accepted} accepted")
        if n == 0:
            return
        self._accepted -= n
        del self._ends[len(self._ends) - n:]
        del self._text[self._ends[-1] if self._ends else 0:]
        if self._states is not None:
            del self._states[len(self._states) - n:]
        if self._eos_accepted:
            self._eos_accepted = False
            n -= 1
        if n and not self._core.rollback(n):
            raise RuntimeError(f"the matcher could not roll back {n} tokens: {self._core.get_error()}")

    def copy(self) -> GrammarMatcher:
        """An independent cursor at the same position (shares the compiled grammar)."""
        other = GrammarMatcher(self.grammar, self._core.deep_copy())
        other._accepted, other._eos_accepted = self._accepted, self._eos_accepted
        other._text, other._ends = bytearray(self._text), list(self._ends)
        if self._states is not None:
            other._states = list(self._states)  # states are immutable: shared
        return other

    def is_terminated(self) -> bool:
        if self._eos_accepted:
            return True
        return self._core.is_accepting() and self._core.is_stopped()

    def is_accepting(self) -> bool:
        """Whether the text so far is a complete sentence (EOS allowed now)."""
        return self._eos_accepted or self._core.is_accepting()

    def forced_continuation(self) -> str:
        """Text every valid continuation starts with (empty when none is forced)."""
        if self._eos_accepted or self._core.is_stopped():
            return ""
        if self._checks is not None and self._checks.at_max_length(self._states[-1]):
            probe = self.copy()  # a counted string at its maxLength: its closing quote
            quote = self.grammar.vocab.byte_tokens[0x22]
            if quote >= 0 and probe.accept_token(quote):
                return '"' + probe.forced_continuation()
        data = self._core.compute_ff_bytes()
        if self._checks is not None:  # never force a refused byte; force a checked object's keys
            data = self._checks.forced(self._core, self._states[-1], data)
        return _decode_prefix(data)

    def required_keys(self) -> list[bytes]:
        """Raw keys (quotes included) that the innermost object checked at runtime still needs
        before its ``}`` (empty elsewhere): completions write them first."""
        if self._checks is None:
            return []
        return self._checks.required_keys(self._states[-1])

    def completion(self, max_bytes: int = 20_000) -> str | None:
        """``completion_bytes`` as text (None when there is none or it ends inside a character)."""
        data = self.completion_bytes(max_bytes)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def completion_bytes(self, max_bytes: int = 20_000) -> bytes | None:
        """Short bytes that complete the document from here (``b""`` when it is complete), or
        None when none is found within ``max_bytes``. Bytes, since the text so far may end
        inside a UTF-8 character.

        See ``constrained.completion``.
        """
        return greedy_completion(self, max_bytes)

    def fill_mask(self, bitmask_row: torch.Tensor) -> None:
        """Write the allowed tokens into ``bitmask_row`` (int32, contiguous, CPU,
        ``[ceil(vocab_size / 32)]``; bit ``i % 32`` of word ``i // 32`` set = token i allowed)."""
        words = check_mask_row(bitmask_row, self.grammar.vocab.mask_words)
        if self._eos_accepted:
            bitmask_row.zero_()
            return
        self._core.unsafe_compute_mask_ptr(bitmask_row.data_ptr(), words * 4)
        if self._checks is not None:
            self._checks.clear_refused(self._states[-1], bitmask_row)

    def validate_tokens(self, token_ids: list[int]) -> int:
        """How many of ``token_ids`` (no EOS) would be accepted in a row from here; the matcher
        does not move."""
        if self._eos_accepted:
            return 0
        n = self._core.validate_tokens(list(token_ids))
        if self._checks is not None:
            state, table = self._states[-1], self.grammar.vocab.token_bytes
            for i, t in enumerate(token_ids[:n]):
                state = self._checks.feed(state, table[t] or b"")  # EOS: no bytes
                if state is None:
                    return i
        return n


def check_mask_row(bitmask_row: torch.Tensor, words: int) -> int:
    """``words`` if ``bitmask_row`` is a contiguous CPU int32 tensor of that many elements, else
    ``ValueError`` (a native core writes into it by pointer)."""
    if (bitmask_row.dtype != torch.int32 or not bitmask_row.is_cpu  # ``is_cpu``: no device object
            or not bitmask_row.is_contiguous() or bitmask_row.numel() != words):
        raise ValueError(f"bitmask_row must be a contiguous CPU int32 tensor of {words} elements, got "
                         f"{bitmask_row.dtype} {tuple(bitmask_row.shape)} on {bitmask_row.device}")
    return words


def _decode_prefix(data: bytes) -> str:
    """The longest prefix of ``data`` that is whole UTF-8 characters."""
    for cut in range(min(4, len(data) + 1)):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


class RuntimeChecks:
    """The runtime checks of one compiled grammar over ``vocab`` (shared by its matchers: states
    are immutable, every memo is safe across threads)."""

    def __init__(self, paths: UniquePaths, vocab: Any) -> None:
        self.tracker = UniqueTracker(paths)
        self.vocab = vocab
        self.initial = self.tracker.initial
        self._members = bool(paths.specs)  # objects whose members are checked at runtime
        self._lengths = bool(paths.strings)  # strings whose length is counted at runtime

    def feed(self, state: tuple, data: bytes) -> tuple | None:
        """The state after an accepted token's bytes, or None when the checks refuse them."""
        return self.tracker.feed(state, data)

    def clear_refused(self, state: tuple, bitmask_row: Any) -> None:
        """Clear from ``bitmask_row`` (the core's mask: int32, CPU) every token the checks refuse
        in ``state``."""
        unique = self.tracker.in_unique(state)
        if unique or self._members or self._lengths:
            words = bitmask_row.numpy().view(np.uint32)  # ~1 µs: taken once per mask
            if unique:
                forbid(self.tracker, self.vocab, state, words)
            if self._members:
                forbid_members(self.tracker, self.vocab, state, words)
            if self._lengths:
                forbid_lengths(self.tracker, self.vocab, state, words)

    def forced(self, core: Any, state: tuple, data: bytes) -> bytes:
        """``data`` (the core's forced bytes from ``state``) cut before a byte the checks refuse,
        then extended by the keys a checked object forces."""
        return forced_with_checks(self.tracker, core, self.vocab, state, data)

    def required_keys(self, state: tuple) -> list[bytes]:
        """Raw keys (quotes included) the innermost checked object still needs before its ``}``."""
        return required_keys(self.tracker, state)

    def at_max_length(self, state: tuple) -> bool:
        """Whether a counted string is open with no character left to write (and no escape)."""
        bounds = self.tracker.bounds(state)
        return bounds is not None and bounds[1] == state.clean and not state.esc
