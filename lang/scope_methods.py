"""``ScopeMethods``: role turns, variable scopes and copies, shared by running and tracing states.

Turns and scopes are a begin/end expression pair around what the program appends in between, so a
state only needs ``+=``: the running ``ProgramState`` enqueues the pair, the tracing
``TracerState`` records it. ``copy`` is a one-child ``fork`` joined on exit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from radixlm.lang import ir


class ScopeMethods:
    """``s.system/user/assistant(...)`` and ``s.var_scope(name)`` for a state that supports ``+=``."""

    def system(self, expr: Any = None):
        """Append a system turn holding ``expr``; without it, ``with s.system():`` opens one."""
        return self._role("system", expr)

    def user(self, expr: Any = None):
        """Append a user turn holding ``expr``; without it, ``with s.user():`` opens one."""
        return self._role("user", expr)

    def assistant(self, expr: Any = None):
        """Append an assistant turn holding ``expr``; without it, ``with s.assistant():`` opens one."""
        return self._role("assistant", expr)

    def var_scope(self, name: str) -> contextlib.AbstractContextManager:
        """``with s.var_scope("x"):`` stores everything appended inside as variable ``x``."""
        return self._scope(ir.VarScopeBegin(name), ir.VarScopeEnd(name))

    @contextlib.contextmanager
    def copy(self, position_ids_offset: list[int] | None = None) -> Iterator[Any]:
        """``with s.copy() as c:`` a one-child fork of ``s``; on exit its variables join back."""
        group = self.fork(1, position_ids_offset)
        try:
            yield group[0]
        finally:
            group.join()

    def _role(self, role: str, expr: Any):
        """With ``expr``: append the whole turn. Without: a context manager for ``with s.user():``."""
        if expr is not None:
            self += ir.role_turn(role, expr)
            return None
        return self._scope(ir.RoleBegin(role), ir.RoleEnd(role))

    @contextlib.contextmanager
    def _scope(self, begin: ir.Expr, end: ir.Expr) -> Iterator[Any]:
        self += begin
        try:
            yield self
        finally:
            self += end  # also on an exception, so the scope is always closed


def check_position_ids_offset(position_ids_offset: Any) -> None:
    """SGLang's ``fork(position_ids_offset=...)`` positions children for parallel encoding.

    Our children always continue at the parent's position, so only None is accepted.
    """
    if position_ids_offset is not None:
        raise ValueError("fork(position_ids_offset=...) is not supported: radixlm forks continue at "
                         "the parent's position (no parallel encoding); leave it None")
