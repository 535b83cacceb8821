"""``LazyTables``: the tables an object (a vocabulary, a compiled grammar, a runtime tracker) owns,
each built on first use by the module that reads it, so the owner needs no import of its builders.

Thread-safe: a table is built once (builders run under the owner's lock, which is reentrant, so a
builder may read another table of the same owner); reads of a built table take no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class LazyTables:
    """Named tables of one owner, built on first use (see the module docstring)."""

    __slots__ = ("_built", "_lock")

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}
        self._lock = threading.RLock()

    def get(self, name: str, build: Callable[[], T]) -> T:
        """The table ``name``, built by ``build()`` the first time it is asked for."""
        try:
            return self._built[name]
        except KeyError:
            pass
        with self._lock:
            if name not in self._built:
                self._built[name] = build()
            return self._built[name]

    def peek(self, name: str) -> Any | None:
        """The table ``name`` if it is built, else None (builds nothing)."""
        return self._built.get(name)

    def drop(self, name: str) -> None:
        """Forget the table ``name`` (the next ``get`` builds it again)."""
        with self._lock:
            self._built.pop(name, None)
