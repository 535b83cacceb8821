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


class ForkGroup(ABC, Generic[S]):
    """``size`` children of ``parent``: index them, append to all, then ``join()``."""

    def __init__(self, parent: S, states: list[S]):
        self.parent = parent
        self.states = states

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, i: int) -> S:
        return self.states[i]

    def __iter__(self) -> Iterator[S]:
        return iter(self.states)

    def __iadd__(self: G, other: Any) -> G:
        """Append to every child: the same expression, or ``lambda i: expr`` per child ``i``."""
        for i, state in enumerate(self.states):
            state += other(i) if callable(other) else other
        return self

    @abstractmethod
    def join(self, mode: str = "gather_variable") -> None:
        """Merge the children back into the parent (``gather_variable`` or ``concate_join``)."""
