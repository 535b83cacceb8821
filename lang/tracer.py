"""The compiler front half: run a program on a recording state to get its IR without a model.

Arguments not given as examples become :class:`Argument` placeholders and generated values read
with ``s["x"]`` become :class:`VarRef` placeholders. Placeholders concatenate with ``+`` but refuse
``str()``/f-strings/branching with a ``TypeError`` that says what to do instead, as tracing
frameworks do. The IR's leading constant nodes give the prefix every run shares, which
``run_batch`` pre-fills once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radixlm.lang import ir
from radixlm.lang.fork_group import ForkGroup, check_join_mode
from radixlm.lang.scope_methods import ScopeMethods, check_position_ids_offset


class TracingError(TypeError):
    """A traced argument was used in a way that needs its concrete value."""


class DataDependentError(TracingError):
    """Host code needed a generated value while tracing; the trace stops there."""


class Placeholder(ir.Expr):
    """A value unknown at trace time; usable only as text to append."""

    name: str
    error_cls: type[TracingError] = TracingError

    def _refuse(self, what: str):
        raise self.error_cls(f"cannot {what} traced {self.kind} {self.name!r}: its value is unknown "
                             f"while tracing. {self.advice()}")

    def advice(self) -> str:
        return (f"Build text with + (e.g. \"Q: \" + {self.name}) or s += ... instead of f-strings or "
                f"str(), or pass an example value: trace({self.name}=...)")

    def __str__(self):
        self._refuse("format")

    def __format__(self, spec):
        self._refuse("format")

    def __bool__(self):
        self._refuse("branch on")

    def __eq__(self, other):
        self._refuse("compare")

    def __ne__(self, other):
        self._refuse("compare")

    __hash__ = object.__hash__

    def __len__(self):
        self._refuse("take the length of")

    def __iter__(self):
        self._refuse("iterate over")

    def __int__(self):
        self._refuse("convert")

    def __float__(self):
        self._refuse("convert")

    def __contains__(self, item):
        self._refuse("search")


@dataclass(eq=False, repr=False)
class Argument(Placeholder):
    """A program argument with no example value."""

    name: str
    kind = "argument"

    def __repr__(self) -> str:
        return f"Argument({self.name!r})"

    def describe(self) -> str:
        return f"arg {self.name}"


@dataclass(eq=False, repr=False)
class VarRef(Placeholder):
    """A generated variable read back with ``s[name]``."""

    name: str
    kind = "variable"
    error_cls = DataDependentError

    def __repr__(self) -> str:
        return f"VarRef({self.name!r})"

    def advice(self) -> str:
        return "Host code that depends on generated text ends the trace here."

    def describe(self) -> str:
        return f"var {self.name}"


class TracerState(ScopeMethods):
    """Stands in for ``ProgramState`` while tracing: records nodes instead of running them."""

    def __init__(self, defined: set[str] | None = None):
        self.nodes: list[ir.Expr] = []
        self.defined: set[str] = set(defined or ())
        self.ret_value: Any = None

    def __iadd__(self, other: Any) -> TracerState:
        for expr in ir.to_exprs(other):
            self.nodes.append(expr)
            name = getattr(expr, "name", None)
            if isinstance(expr, (ir.Gen, ir.Select, ir.VarScopeBegin)) and name:
                self.defined.add(name)
        return self

    def __setitem__(self, name: str, value: Any) -> None:
        self += ir.SetVar(name, value)

    def __getitem__(self, name: str) -> VarRef:
        if name not in self.defined:
            raise KeyError(f"unknown variable {name!r}; defined variables: {sorted(self.defined)}")
        return VarRef(name)

    get_var = __getitem__
    set_var = __setitem__

    def __contains__(self, name: str) -> bool:
        return name in self.defined

    def fork(self, size: int = 1, position_ids_offset: list[int] | None = None) -> TracerGroup:
        check_position_ids_offset(position_ids_offset)
        node = ir.Fork(size, [[] for _ in range(size)])
        self.nodes.append(node)
        children = [TracerState(self.defined) for _ in range(size)]
        for child, branch in zip(children, node.branches):
            child.nodes = branch
        return TracerGroup(self, children)

    def sync(self) -> TracerState:
        return self

    def _unavailable(self, what: str):
        raise DataDependentError(f"{what} is not available while tracing (it depends on generated text)")

    def text(self):
        self._unavailable("text()")

    def messages(self):
        self._unavailable("messages()")

    def get_meta_info(self, name: str):
        self._unavailable("get_meta_info()")

    def error(self):
        return None


class TracerGroup(ForkGroup[TracerState]):
    """The traced ``fork``: records appends into each branch and the join into the parent."""

    def join(self, mode: str = "gather_variable") -> None:
        """Record the join; after ``gather_variable`` the parent knows every variable a child defined."""
        check_join_mode(mode)
        self.parent.nodes.append(ir.Join(mode))
        if mode == "gather_variable":  # the concatenating modes append text, not variables
            for state in self.states:
                self.parent.defined |= state.defined


def trace(func: Callable, kwargs: dict[str, Any], strict: bool = True) -> ir.ProgramIR:
    """Trace ``func(s, **kwargs)``; parameters missing from ``kwargs`` become placeholders.

    Host code that needs a generated value stops the trace (recorded in ``ProgramIR.stopped``).
    With ``strict`` misuse of an argument placeholder (an f-string) raises ``TracingError``;
    without it any exception just stops the trace (used to find the constant prefix).
    """
    params = list(inspect.signature(func).parameters.values())[1:]
    names = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    args: dict[str, Any] = {n: Argument(n) for n, p in zip(names, params) if p.default is p.empty}
    args.update(kwargs)
    state = TracerState()
    stopped = None
    try:
        state.ret_value = func(state, **args)
    except DataDependentError as e:
        stopped = str(e)
    except Exception as e:
        if strict:
            raise
        stopped = f"{type(e).__name__}: {e}"
    return ir.ProgramIR(getattr(func, "__name__", "program"), names, state.nodes, stopped)
