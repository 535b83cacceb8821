"""``ProgramState``: what a program's ``s`` is, and what ``run`` returns.

Appending (``s += ...``) enqueues on the state's interpreter and returns immediately; reading
(``s["x"]``, ``text()``, ``messages()``) waits for the expressions it depends on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from radixlm.lang import ir
from radixlm.lang.fork_group import ForkGroup
from radixlm.lang.interpreter import StreamExecutor, _Raise
from radixlm.lang.scope_methods import ScopeMethods


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

    def fork(self, size: int = 1) -> ProgramStateGroup:
        """``size`` children sharing this state's text so far (pre-filled once for all of them)."""
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
    def text_iter(self, var: str | None = None) -> Iterator[str]:
        """Yield the text (or variable ``var``) in pieces as it is generated (``stream=True``)."""
        pos = 0
        while True:
            chunk, pos, done = self._next_chunk(var, pos)
            if chunk:
                yield chunk
            if done:
                return

    async def text_async_iter(self, var: str | None = None,
                              return_meta_data: bool = False) -> AsyncIterator[Any]:
        """Async ``text_iter``; with ``return_meta_data`` yields ``(chunk, meta_info)`` pairs."""
        pos = 0
        while True:
            chunk, pos, done = await asyncio.to_thread(self._next_chunk, var, pos)
            if chunk:
                if return_meta_data:
                    meta = self._exec.meta_info.get(var) if var else None
                    yield chunk, meta
                else:
                    yield chunk
            if done:
                return

    def _next_chunk(self, var: str | None, pos: int) -> tuple[str, int, bool]:
        """Wait for text past ``pos``; return (new text, new pos, whether the source is complete)."""
        ex = self._exec
        with ex.cond:
            while True:
                if var is None:
                    current, done = ex.text_, ex.finished or ex.error_ is not None
                else:
                    event = ex.events.get(var)
                    if event is None and var not in ex.variables:
                        if ex.finished or ex.error_ is not None:
                            raise KeyError(f"unknown variable {var!r}")
                        ex.cond.wait()
                        continue
                    done = event is None or event.is_set()
                    current = ex.variables.get(var, "") if done else ex.partial.get(var, "")
                    current = current if isinstance(current, str) else str(current)
                if len(current) > pos or done:
                    return current[pos:], len(current), done
                ex.cond.wait()


class ProgramStateGroup(ForkGroup[ProgramState]):
    """The running children of ``s.fork(n)``; ``join`` waits for them and merges them back."""

    def join(self, mode: str = "gather_variable") -> None:
        """Wait for the children and merge them into the parent.

        ``gather_variable``: each variable a child set becomes a list (one entry per child, None
        where a child lacks it) on the parent. ``concate_join``: append the children's new texts.
        """
        if mode not in ("gather_variable", "concate_join"):
            raise ValueError(f"join mode must be 'gather_variable' or 'concate_join', got {mode!r}")
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
