"""``ForkGroup``: the children of ``s.fork(n)``, shared by running and tracing states.

Indexing, iterating and appending to every child work the same whether the children run
(``ProgramStateGroup``) or are being traced (``TracerGroup``); only ``join`` differs, so each
subclass supplies just that.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

S = TypeVar("S")  # the state type of the children
G = TypeVar("G", bound="ForkGroup")

# SGLang's join modes, and our older name for concate_and_append.
JOIN_MODES = ("gather_variable", "concate_and_append", "concate_join")


def check_join_mode(mode: str) -> None:
    """``ValueError`` naming the accepted modes unless ``mode`` is one of them."""
    if mode not in JOIN_MODES:
        raise ValueError(f"join mode must be one of {', '.join(map(repr, JOIN_MODES))}, got {mode!r}")


class ForkGroup(ABC, Generic[S]):
    """``size`` children of ``parent``: index them, append to all, then ``join()``."""

    def __init__(self, parent: S, states: list[S]):
        self.parent = parent
        self.states = states

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, i: int) -> S:
        return self.states[i]

    def __setitem__(self, i: int, value: S) -> None:
        """Completes ``forks[i] += expr``, which Python runs as ``forks[i] = forks[i].__iadd__(expr)``.

        Appending returns the child itself, so storing it back is a no-op; anything else would
        replace a child, which SGLang forbids as well.
        """
        if value is not self.states[i]:
            raise TypeError(f"cannot replace fork child {i}: use forks[{i}] += expr to append to it")

    def __iter__(self) -> Iterator[S]:
        return iter(self.states)

    def __iadd__(self: G, other: Any) -> G:
        """Append to every child: one expression, ``lambda i: expr`` per child, or a list (one each)."""
        if isinstance(other, (list, tuple)):
            if len(other) != len(self.states):
                raise ValueError(f"forks += list needs one entry per child: got {len(other)} for "
                                 f"{len(self.states)} children")
            for state, item in zip(self.states, other):
                state += item
            return self
        for i, state in enumerate(self.states):
            state += other(i) if callable(other) else other
        return self

    @abstractmethod
    def join(self, mode: str = "gather_variable") -> None:
        """Merge the children back into the parent (``gather_variable`` or ``concate_and_append``)."""
