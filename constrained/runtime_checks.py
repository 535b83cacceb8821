"""``RuntimeChecks``: the one seam between ``GrammarMatcher`` and the checks a grammar cannot say
(``uniqueItems`` over free values, runtime-checked object members, counted string lengths).

The matcher holds one (None for grammars without such checks) and knows no check by name: it feeds
each accepted token's bytes (``feed``, one immutable reader state per token), lets it clear the
refused tokens from a mask row (``clear_refused``), and asks it for forced text (``forced``), the
keys a checked object still needs (``required_keys``) and whether a counted string is full
(``at_max_length``). The reader lives in ``checks/``, the mask filters that equal it on every
allowed token in ``masks/``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from radixlm.constrained.checks.forced import forced_with_checks, required_keys
from radixlm.constrained.checks.paths import UniquePaths
from radixlm.constrained.checks.tracker import UniqueTracker
from radixlm.constrained.masks.duplicate_items import forbid
from radixlm.constrained.masks.members import forbid_members
from radixlm.constrained.masks.string_lengths import forbid_lengths


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
