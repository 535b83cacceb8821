"""The program IR: one small dataclass per expression a program can append with ``s += ...``.

The same nodes are what the interpreter executes and what the tracer records, so a traced program
prints exactly the steps a run would perform. ``+`` between expressions (or with plain strings)
builds an :class:`ExprList`, so ``s += "Q: " + question + gen("a")`` works both when running and
when tracing (where ``question`` is an :class:`Argument` placeholder).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# SGLang's type regexes (``sglang.lang.ir``), with its exact values, for ``gen(regex=REGEX_INT)``.
# ``gen(dtype=...)`` uses the bounded forms in ``DTYPE_REGEX`` (below) instead, so
# that a typed gen always ends on its own rather than at ``max_tokens``.
REGEX_INT = r"[-+]?[0-9]+[ \n]*"
REGEX_FLOAT = r"[-+]?[0-9]*\.?[0-9]+[ \n]*"
REGEX_BOOL = r"(True|False)"
REGEX_STR = r"\"[\w\d\s]*\""  # SGLang's comment: r"\".*\"" hit a bug in the interegular package

# dtype -> regex for ``gen(dtype=...)``: bounded, so that a typed gen always terminates on its own.
DTYPE_REGEX: dict[str, str] = {
    "int": r"[-+]?[0-9]{1,9}",
    "float": r"[-+]?[0-9]{1,9}\.[0-9]{1,6}",
    "bool": r"(True|False)",
    "str": r'"[^"\\\n]{0,64}"',
}


def dtype_of_regex(regex: str | None) -> str | None:
    """The dtype name whose regex ``gen(dtype=...)`` put into the params, if it is one of them."""
    return next((k for k, v in DTYPE_REGEX.items() if v == regex), None)


class Expr:
    """Base of every appendable expression; supports ``+`` with strings and other expressions."""

    def __add__(self, other: Any) -> ExprList:
        return ExprList(to_exprs(self) + to_exprs(other))

    def __radd__(self, other: Any) -> ExprList:
        return ExprList(to_exprs(other) + to_exprs(self))

    def describe(self) -> str:
        """One readable line for IR printing."""
        return repr(self)


def to_exprs(value: Any) -> list[Expr]:
    """Normalise a string, expression or expression list to a flat list of leaf expressions."""
    if isinstance(value, ExprList):
        return list(value.items)
    if isinstance(value, Expr):
        return [value]
    if isinstance(value, str):
        return [Text(value)]
    raise TypeError(f"cannot append a {type(value).__name__} to a program state; "
                    "append str or an expression such as gen(...), select(...), user(...)")


@dataclass(eq=False)
class ExprList(Expr):
    """A concatenation of expressions, executed in order."""

    items: list[Expr]

    def describe(self) -> str:
        return " + ".join(e.describe() for e in self.items)


@dataclass(eq=False)
class Text(Expr):
    """Constant text appended to the context."""

    value: str

    def describe(self) -> str:
        shown = self.value if len(self.value) <= 60 else self.value[:57] + "..."
        return f"text {shown!r}"


@dataclass(eq=False)
class Gen(Expr):
    """Generate a completion of the current context; stored as variable ``name`` when named.

    ``params`` holds only the sampling fields the call set (SGLang names: ``max_new_tokens``,
    ``regex``, ...); the run's defaults fill the rest. The ``return_logprob`` family goes to the
    request, not to the sampling params.
    """

    name: str | None
    params: dict[str, Any] = field(default_factory=dict)
    logprob: dict[str, Any] = field(default_factory=dict)
    reasoning: str | None = None  # separate_reasoning's format: the thinking goes to its own variable

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in {**self.params, **self.logprob}.items())
        return f"gen {self.name or '_'}({args})" + (f" separate_reasoning={self.reasoning}" if self.reasoning else "")


@dataclass(eq=False)
class Select(Expr):
    """Pick one of ``choices`` by scoring each continuation with prompt logprobs."""

    name: str | None
    choices: list[str]
    temperature: float = 0.0
    method: Any = None  # a choices.ChoicesMethod
    reasoning: str | None = None  # as Gen.reasoning

    def describe(self) -> str:
        method = getattr(self.method, "name", "token_length_normalized")
        return f"select {self.name or '_'}({self.choices!r}, method={method})"


@dataclass(eq=False)
class RoleBegin(Expr):
    """Start a chat turn: appends the chat template's prefix for ``role``."""

    role: str

    def describe(self) -> str:
        return f"role_begin {self.role}"


@dataclass(eq=False)
class RoleEnd(Expr):
    """End the current chat turn: appends the template's suffix and records the message."""

    role: str

    def describe(self) -> str:
        return f"role_end {self.role}"


def role_turn(role: str, expr: Any = None) -> ExprList:
    """A whole chat turn: ``role``'s begin, ``expr`` (if any), its end."""
    inner = [] if expr is None else to_exprs(expr)
    return ExprList([RoleBegin(role), *inner, RoleEnd(role)])


@dataclass(eq=False)
class VarScopeBegin(Expr):
    """Start capturing everything appended until the matching end as variable ``name``."""

    name: str

    def describe(self) -> str:
        return f"var_scope_begin {self.name}"


@dataclass(eq=False)
class VarScopeEnd(Expr):
    """End the capture started by the ``VarScopeBegin`` of the same ``name``."""

    name: str

    def describe(self) -> str:
        return f"var_scope_end {self.name}"


@dataclass(eq=False)
class SetVar(Expr):
    """Host-side ``s[name] = value`` (ordered with the other expressions)."""

    name: str
    value: Any
    meta: Any = None

    def describe(self) -> str:
        return f"set {self.name} = {self.value!r}"


@dataclass(eq=False)
class Fork(Expr):
    """``s.fork(n)``: ``branches[i]`` are the nodes appended to child ``i``."""

    size: int
    branches: list[list[Expr]] = field(default_factory=list)

    def describe(self) -> str:
        return f"fork {self.size}"


@dataclass(eq=False)
class Join(Expr):
    """``forks.join(mode)``: gather the children's variables (or texts) back into the parent."""

    mode: str = "gather_variable"

    def describe(self) -> str:
        return f"join ({self.mode})"


def reasoning_var(name: str) -> str:
    """The variable that holds the thinking split off ``name`` (SGLang's naming)."""
    return f"{name}_reasoning_content"


# Leaf kinds whose text is known without running the model.
CONSTANT_KINDS = (Text, RoleBegin, RoleEnd, VarScopeBegin, VarScopeEnd)


@dataclass(eq=False)
class ProgramIR:
    """A traced program: its name, parameter names and the flat list of top-level nodes.

    ``stopped`` says why tracing ended early (host code needed a generated value), else None.
    """

    name: str
    arguments: list[str]
    nodes: list[Expr]
    stopped: str | None = None

    def lines(self) -> list[str]:
        out = [f"program {self.name}({', '.join(self.arguments)})"]
        _append_lines(out, self.nodes, "  ")
        if self.stopped:
            out.append(f"  <trace stopped: {self.stopped}>")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def print(self) -> None:
        """Print the IR, one node per line, fork branches indented."""
        print(str(self))

    def constant_prefix(self, template: Any) -> str:
        """The text every run starts with: leading constant nodes, roles rendered by ``template``."""
        parts: list[str] = []
        has_messages = False
        for node in self.nodes:
            if not isinstance(node, CONSTANT_KINDS):
                break
            if isinstance(node, Text):
                parts.append(node.value)
            elif isinstance(node, RoleBegin):
                parts.append(template.prefix(node.role, first=not has_messages and not "".join(parts)))
            elif isinstance(node, RoleEnd):
                parts.append(template.suffix(node.role))
                has_messages = True
        return "".join(parts)


def _append_lines(out: list[str], nodes: list[Expr], indent: str) -> None:
    for node in nodes:
        out.append(indent + node.describe())
        if isinstance(node, Fork):
            for i, branch in enumerate(node.branches):
                out.append(f"{indent}  branch {i}:")
                _append_lines(out, branch, indent + "    ")
