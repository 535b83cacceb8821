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

    __slots__ = ("_built", "_lock", "builds")

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}
        self._lock = threading.RLock()
        self.builds = 0  # tables built by ``get`` (each name once, unless dropped): a test's counter

    def get(self, name: str, build: Callable[[], T]) -> T:
        """The table ``name``, built by ``build()`` the first time it is asked for."""
        try:
            return self._built[name]
        except KeyError:
            pass
        with self._lock:
            if name not in self._built:
                self._built[name] = build()
                self.builds += 1
            return self._built[name]

    def peek(self, name: str) -> Any | None:
        """The table ``name`` if it is built, else None (builds nothing)."""
        return self._built.get(name)

    def drop(self, name: str) -> None:
        """Forget the table ``name`` (the next ``get`` builds it again)."""
        with self._lock:
            self._built.pop(name, None)

    def put(self, name: str, table: Any) -> None:
        """File ``table`` as ``name`` (replacing a built one)."""
        with self._lock:
            self._built[name] = table


class TableSlot:
    """One kind of table, seen from the module that builds it: ``of(owner, build)`` reads the
    owner's table (building it on first use); the owner holds it, in its ``tables``. Reads like a
    mapping keyed on the owner (``get``, ``[owner]``, ``pop``); ``clear()`` makes every owner build
    its table afresh on next use (the old ones are left to their owners)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._key = f"{name}#0"
        self._epoch = 0

    def of(self, owner: Any, build: Callable[[], T]) -> T:
        """``owner``'s table, built by ``build()`` the first time."""
        return owner.tables.get(self._key, build)

    def get(self, owner: Any, default: Any = None) -> Any:
        found = owner.tables.peek(self._key)
        return default if found is None else found

    def __getitem__(self, owner: Any) -> Any:
        found = owner.tables.peek(self._key)
        if found is None:
            raise KeyError(owner)
        return found

    def __setitem__(self, owner: Any, table: Any) -> None:
        owner.tables.put(self._key, table)

    def pop(self, owner: Any, default: Any = None) -> Any:
        found = self.get(owner, default)
        owner.tables.drop(self._key)
        return found

    def clear(self) -> None:
        self._epoch += 1
        self._key = f"{self.name}#{self._epoch}"
