"""``SglFunction``: a decorated program and the ways to run it: once, in a batch, or traced.

``run_batch`` runs every member on its own state in a thread pool, so their requests are in flight
together and the engine batches them. With ``generator_style=True`` the states are yielded in
input order, each as soon as it (and those before it) finished, as SGLang's generator does; the
rest keep running.

Tracing (``trace``, the compiler front half) runs a program on a recording state to get its IR
without a model. Arguments not given as examples become :class:`Argument` placeholders and
generated values read with ``s["x"]`` become :class:`VarRef` placeholders. Placeholders
concatenate with ``+`` but refuse ``str()``/f-strings/branching with a ``TypeError`` that says what
to do instead, as tracing frameworks do. The IR's leading constant nodes give the prefix every run
shares, which ``run_batch`` pre-fills once.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from radixlm.lang import ir
from radixlm.lang.backends import resolve_backend
from radixlm.lang.interpreter import StreamExecutor
from radixlm.lang.state import (
    ForkGroup,
    ProgramState,
    ScopeMethods,
    check_join_mode,
    check_position_ids_offset,
)

__all__ = ["SglFunction", "TracingError", "DataDependentError", "split_run_options", "trace"]

# run() keywords that are sampling params, with SGLang's defaults (None: left to the engine, whose
# defaults for the sampler fields are the model's: runtime/sampling_params.py SamplingDefaults)
SAMPLING_DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 128, "n": None, "stop": None, "stop_token_ids": None, "stop_regex": None,
    "temperature": None, "top_p": None, "top_k": None, "min_p": None, "frequency_penalty": None,
    "presence_penalty": None, "ignore_eos": False,
}
LOGPROB_KEYS = ("return_logprob", "logprob_start_len", "top_logprobs_num", "return_text_in_logprobs")


def split_run_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split keywords into (sampling defaults, logprob defaults, program arguments)."""
    sampling = dict(SAMPLING_DEFAULTS)
    logprob: dict[str, Any] = {}
    program_args = {}
    for key, value in options.items():
        if key in SAMPLING_DEFAULTS:
            sampling[key] = value
        elif key in LOGPROB_KEYS:
            if value is not None:
                logprob[key] = value
        else:
            program_args[key] = value
    sampling = {k: v for k, v in sampling.items() if v is not None}
    return sampling, logprob, program_args


class SglFunction:
    """A program: ``func(s, *args, **kwargs)`` appending to the state ``s``."""

    def __init__(self, func: Callable, bound: dict[str, Any] | None = None):
        if not callable(func):
            raise TypeError(f"@function needs a callable, got {type(func).__name__}")
        params = list(inspect.signature(func).parameters)
        if not params:
            raise TypeError(f"program {func.__name__!r} must take the state as its first parameter")
        self.func = func
        self.bound = dict(bound or {})
        self.__name__ = getattr(func, "__name__", "program")
        self.__doc__ = func.__doc__

    def bind(self, **kwargs: Any) -> SglFunction:
        """A copy with some arguments fixed."""
        return SglFunction(self.func, {**self.bound, **kwargs})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inside another program (first argument a state) call as a sub-program; else ``run``."""
        if args and isinstance(args[0], (ProgramState, TracerState)):
            return self.func(args[0], *args[1:], **{**self.bound, **kwargs})
        return self.run(*args, **kwargs)

    def run(self, *args: Any, stream: bool = False, backend: Any = None, use_thread: bool = True,
            prefill_prefix: bool = True, **kwargs: Any) -> ProgramState:
        """Run once; returns when the program finished (at once with ``stream=True``).

        Sampling keywords (``max_new_tokens``, ``n``, ``stop``, ``stop_regex``, ``temperature``,
        ``top_p``, ``top_k``, ``min_p``, ``frequency_penalty``, ``presence_penalty``, the
        ``return_logprob`` family, ...) are the defaults of every gen; other keywords are the
        program's arguments. ``use_thread=False`` (SGLang) runs each ``s += ...`` before it returns.
        """
        sampling, logprob, program_args = split_run_options(kwargs)
        state = self._new_state(resolve_backend(backend), sampling, logprob, stream, prefill_prefix,
                                blocking=not use_thread)
        if stream:
            threading.Thread(target=self._run_streaming, args=(state, args, program_args),
                             daemon=True, name="radixlm-program").start()
            return state
        try:
            state.ret_value = self.func(state, *args, **{**self.bound, **program_args})
        finally:
            state._exec.end()
        state._exec.sync()
        return state

    def run_batch(self, batch_kwargs: list[dict[str, Any]] | list[list[Any]], *,
                  num_threads: int | str = "auto", progress_bar: bool = False,
                  generator_style: bool = False, backend: Any = None, prefill_prefix: bool = True,
                  **options: Any) -> list[ProgramState] | Iterator[ProgramState]:
        """Run once per kwargs dict (or list of positional values), concurrently.

        The batch's shared prefix is pre-filled once first. ``num_threads`` ("auto": max(96, 16 x
        CPUs)) bounds the programs running at once; ``progress_bar`` shows a tqdm bar;
        ``generator_style=True`` returns a generator yielding the states in input order, each
        as soon as it is done.
        """
        batch = normalize_arguments(self.func, batch_kwargs)
        sampling, logprob, extra = split_run_options(options)
        if extra:
            raise TypeError(f"run_batch got unknown keyword(s): {', '.join(sorted(extra))}")
        workers = num_workers(num_threads, len(batch))
        if not batch:
            return iter(()) if generator_style else []
        backend = resolve_backend(backend)
        if prefill_prefix and len(batch) > 1:
            prefix = self.shared_prefix(batch, backend.role_template)
            if prefix:
                backend.generate(prefix, {"max_new_tokens": 0})

        def one(kwargs: dict[str, Any]) -> ProgramState:
            state = self._new_state(backend, sampling, logprob, False, prefill_prefix)
            try:
                state.ret_value = self.func(state, **{**self.bound, **kwargs})
            finally:
                state._exec.end()
                state._exec.sync()
            return state

        if generator_style:
            return iter_results(one, batch, workers, progress_bar)
        return run_all(one, batch, workers, progress_bar)

    def trace(self, **example_kwargs: Any) -> ir.ProgramIR:
        """The program's IR; arguments not given become placeholders (f-strings on them raise)."""
        return trace(self.func, {**self.bound, **example_kwargs}, strict=True)

    def shared_prefix(self, batch_kwargs: list[dict[str, Any]], template: Any) -> str:
        """The longest text every member's trace starts with (constant nodes, roles rendered)."""
        prefix: str | None = None
        for kwargs in batch_kwargs:
            text = trace(self.func, {**self.bound, **kwargs}, strict=False).constant_prefix(template)
            prefix = text if prefix is None else _common_prefix(prefix, text)
            if not prefix:
                return ""
        return prefix or ""

    def _new_state(self, backend, sampling, logprob, stream, prefill, blocking=False) -> ProgramState:
        return ProgramState(StreamExecutor(backend, sampling, logprob, stream=stream, prefill=prefill,
                                           blocking=blocking))

    def _run_streaming(self, state: ProgramState, args: tuple, program_args: dict) -> None:
        try:
            state.ret_value = self.func(state, *args, **{**self.bound, **program_args})
        except Exception as e:  # no caller to raise to: report through s.error()
            state._exec._fail(e)
        finally:
            state._exec.end()


def _common_prefix(a: str, b: str) -> str:
    return os.path.commonprefix([a, b])


# ---- tracing ----------------------------------------------------------------------------------


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


# ---- run_batch ----------------------------------------------------------------------------------


def normalize_arguments(func: Callable, batch: Any) -> list[dict[str, Any]]:
    """``batch`` as a list of kwargs dicts; lists/tuples of positional values are mapped to names."""
    if not isinstance(batch, (list, tuple)):
        raise TypeError("run_batch expects a list of dicts of program arguments")
    if not batch or all(isinstance(k, dict) for k in batch):
        return list(batch)
    params = list(inspect.signature(func).parameters.values())[1:]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(1 for p in params if p.name in names and p.default is p.empty)
    out = []
    for i, values in enumerate(batch):
        if not isinstance(values, (list, tuple)) or not required <= len(values) <= len(names):
            raise TypeError(f"run_batch item {i} ({values!r}) does not match the program's arguments "
                            f"({', '.join(names)}): pass a dict, or a list of {required} to "
                            f"{len(names)} positional values")
        out.append(dict(zip(names, values)))
    return out


def num_workers(num_threads: int | str, n: int) -> int:
    """SGLang's rule: ``"auto"`` is max(96, 16 x CPUs); never more threads than programs."""
    if num_threads == "auto":
        num_threads = max(96, 16 * (os.cpu_count() or 1))
    elif not isinstance(num_threads, int) or isinstance(num_threads, bool) or num_threads < 1:
        raise ValueError(f"num_threads must be 'auto' or a positive integer, got {num_threads!r}")
    return max(1, min(num_threads, n))


def run_all(run_one: Callable[[dict], Any], batch: list[dict[str, Any]], workers: int,
            progress_bar: bool) -> list[Any]:
    """``run_one`` on every kwargs dict; returns the results in input order."""
    return list(iter_results(run_one, batch, workers, progress_bar))


def iter_results(run_one: Callable[[dict], Any], batch: list[dict[str, Any]], workers: int,
                 progress_bar: bool) -> Iterator[Any]:
    """Yield ``run_one(kwargs)`` for each dict in input order, all running ``workers`` at a time."""
    bar = _progress(len(batch)) if progress_bar else None
    try:
        if workers == 1:  # one at a time, in the caller's thread (SGLang's num_threads=1)
            for kwargs in batch:
                result = run_one(kwargs)
                if bar is not None:
                    bar.update(1)
                yield result
            return
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="radixlm-batch")
        try:
            futures = [pool.submit(run_one, kwargs) for kwargs in batch]
            if bar is not None:
                for future in futures:
                    future.add_done_callback(lambda _: bar.update(1))
            for future in futures:
                yield future.result()
        finally:
            # An abandoned generator must not keep queued programs alive; running ones finish.
            pool.shutdown(wait=True, cancel_futures=True)
    finally:
        if bar is not None:
            bar.close()


def _progress(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="run_batch")
