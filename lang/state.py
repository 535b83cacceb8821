"""``ProgramState``: what a program's ``s`` is, and what ``run`` returns; the methods it shares with the tracer.

Appending (``s += ...``) enqueues on the state's interpreter and returns immediately; reading
(``s["x"]``, ``text()``, ``messages()``) waits for the expressions it depends on.

Running and tracing states (``TracerState``, :mod:`radixlm.lang.program`) share two bases:

- ``ScopeMethods``: role turns, variable scopes and copies. Turns and scopes are a begin/end
  expression pair around what the program appends in between, so a state only needs ``+=``: the
  running state enqueues the pair, the tracing state records it. ``copy`` is a one-child ``fork``
  joined on exit.
- ``ForkGroup``: the children of ``s.fork(n)``. Indexing, iterating and appending to every child
  work the same whether the children run (``ProgramStateGroup``) or are being traced
  (``TracerGroup``); only ``join`` differs, so each subclass supplies just that.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from typing import Any, Generic, TypeVar

from radixlm.lang import ir
from radixlm.lang.interpreter import StreamExecutor, TextReader, _Raise

S = TypeVar("S")  # the state type of a fork's children
G = TypeVar("G", bound="ForkGroup")

# SGLang's join modes, and our older name for concate_and_append.
JOIN_MODES = ("gather_variable", "concate_and_append", "concate_join")


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


class ProgramState(ScopeMethods):
    """The state of one running program (SGLang's ``ProgramState``)."""

    def __init__(self, executor: StreamExecutor):
        self._exec = executor
        self.ret_value: Any = None

    # ---- appending ------------------------------------------------------------------------
    def __iadd__(self, other: Any) -> ProgramState:
        self._exec.submit(other)
        return self

    def __setitem__(self, name: str, value: Any) -> None:
        self._exec.submit(ir.SetVar(name, value))

    def fork(self, size: int = 1, position_ids_offset: list[int] | None = None) -> ProgramStateGroup:
        """``size`` children sharing this state's text so far (pre-filled once for all of them)."""
        check_position_ids_offset(position_ids_offset)
        return ProgramStateGroup(self, [ProgramState(e) for e in self._exec.fork(size)])

    # ---- reading --------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        return self._exec.get_var(name)

    def get_var(self, name: str) -> Any:
        return self._exec.get_var(name)

    def set_var(self, name: str, value: Any) -> None:
        self[name] = value

    def __contains__(self, name: str) -> bool:
        return name in self._exec.variables or name in self._exec.events

    def get_meta_info(self, name: str) -> Any:
        """The engine's ``meta_info`` for the gen/select that set ``name`` (choice scores for select)."""
        self._exec.get_var(name)
        return self._exec.meta_info.get(name)

    def sync(self) -> ProgramState:
        self._exec.sync()
        return self

    def text(self) -> str:
        self._exec.sync()
        return self._exec.text_

    def messages(self) -> list[dict[str, str]]:
        """The chat turns so far in OpenAI format: ``[{"role": ..., "content": ...}, ...]``."""
        self._exec.sync()
        return [dict(m) for m in self._exec.messages_]

    def error(self) -> BaseException | None:
        """The exception that stopped this program (e.g. the engine rejecting a schema), or None."""
        self._exec.sync()
        return self._exec.error_

    def __repr__(self) -> str:
        return f"ProgramState({self._exec.text_[-80:]!r})"

    # ---- streaming ------------------------------------------------------------------------
    def text_iter(self, var_name: str | None = None) -> Iterator[str]:
        """Yield the text (or variable ``var_name``) in pieces as it is generated (``stream=True``).

        Without streaming, pieces arrive as whole expressions finish (a variable: in one piece).
        """
        reader = TextReader(self._exec, var_name)
        while True:
            piece, _, done = reader.next_piece()
            if piece:
                yield piece
            if done:
                return

    async def text_async_iter(self, var_name: str | None = None,
                              return_meta_data: bool = False) -> AsyncIterator[Any]:
        """Async ``text_iter``; with ``return_meta_data`` yields ``(piece, meta_info)`` pairs.

        A piece's ``meta_info`` is that of the engine chunks that produced it: the newest fields,
        with ``output_token_logprobs`` (when the gen set ``return_logprob=True``) covering exactly
        the piece's tokens; None for text no gen produced. Meta info that arrives with no new text
        (e.g. the last chunk's finish reason) goes with the next piece, or a final ``("", meta)``.
        """
        reader = TextReader(self._exec, var_name)
        while True:
            piece, meta, done = await asyncio.to_thread(reader.next_piece)
            if piece or (return_meta_data and done and meta is not None):
                yield (piece, meta) if return_meta_data else piece
            if done:
                return


class ProgramStateGroup(ForkGroup[ProgramState]):
    """The running children of ``s.fork(n)``; ``join`` waits for them and merges them back."""

    def join(self, mode: str = "gather_variable") -> None:
        """Wait for the children and merge them into the parent.

        ``gather_variable``: each variable a child set becomes a list (one entry per child, None
        where a child lacks it) on the parent. ``concate_and_append`` (SGLang's name; also
        ``concate_join``): append the children's new texts, in order, to the parent's text.
        """
        check_join_mode(mode)
        execs = [s._exec for s in self.states]
        for ex in execs:
            ex.end()  # the children are complete: their streams may finish
            ex.sync()
        if mode == "gather_variable":
            names = list(dict.fromkeys(n for ex in execs for n in ex.new_vars))
            for name in names:
                values = [ex.variables.get(name) if name in ex.new_vars else None for ex in execs]
                metas = [ex.meta_info.get(name) if name in ex.new_vars else None for ex in execs]
                self.parent._exec.submit(ir.SetVar(name, values, metas))
        else:
            self.parent._exec.submit(ir.Text("".join(ex.text_[ex.fork_start:] for ex in execs)))
        failed = next((ex.error_ for ex in execs if ex.error_ is not None), None)
        if failed is not None:
            self.parent._exec.submit(_Raise(failed))
