"""``ProgramState``: what a program's ``s`` is, and what ``run`` returns.

Appending (``s += ...``) enqueues on the state's interpreter and returns immediately; reading
(``s["x"]``, ``text()``, ``messages()``) waits for the expressions it depends on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from radixlm.lang import ir
from radixlm.lang.fork_group import ForkGroup, check_join_mode
from radixlm.lang.interpreter import StreamExecutor, _Raise
from radixlm.lang.scope_methods import ScopeMethods, check_position_ids_offset
from radixlm.lang.text_stream import TextReader


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
