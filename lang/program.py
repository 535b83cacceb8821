"""``SglFunction``: a decorated program and the ways to run it (once, in a batch, traced)."""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from radixlm.lang import ir
from radixlm.lang.backend_engine import as_backend
from radixlm.lang.interpreter import StreamExecutor
from radixlm.lang.state import ProgramState
from radixlm.lang.tracer import TracerState, trace

_default_backend: Any = None

# run() keywords that are sampling params, with SGLang's defaults
SAMPLING_DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 128, "stop": None, "stop_token_ids": None, "temperature": 1.0, "top_p": 1.0,
    "top_k": -1, "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0, "ignore_eos": False,
}
LOGPROB_KEYS = ("return_logprob", "logprob_start_len", "top_logprobs_num")


def set_default_backend(backend: Any) -> None:
    """Use ``backend`` (an ``Engine`` or a ``RuntimeEndpoint``) when a run names none; None clears it."""
    global _default_backend
    _default_backend = None if backend is None else as_backend(backend)


def resolve_backend(backend: Any) -> Any:
    if backend is not None:
        return as_backend(backend)
    if _default_backend is None:
        raise ValueError("no backend: pass backend=... or call set_default_backend(Engine(...) or "
                         "RuntimeEndpoint(url)) first")
    return _default_backend


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

    def run(self, *args: Any, stream: bool = False, backend: Any = None, prefill_prefix: bool = True,
            **kwargs: Any) -> ProgramState:
        """Run once; returns when the program finished (at once with ``stream=True``).

        Sampling keywords (``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``, ``min_p``,
        ``frequency_penalty``, ``presence_penalty``, ``stop``, ...) are the defaults of every gen;
        other keywords are the program's arguments.
        """
        sampling, logprob, program_args = split_run_options(kwargs)
        state = self._new_state(resolve_backend(backend), sampling, logprob, stream, prefill_prefix)
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

    def run_batch(self, batch_kwargs: list[dict[str, Any]], *, num_threads: int | str = "auto",
                  progress_bar: bool = False, backend: Any = None, prefill_prefix: bool = True,
                  **options: Any) -> list[ProgramState]:
        """Run once per kwargs dict, concurrently; the batch's shared prefix is pre-filled once."""
        if not isinstance(batch_kwargs, list) or not all(isinstance(k, dict) for k in batch_kwargs):
            raise TypeError("run_batch expects a list of dicts of program arguments")
        sampling, logprob, extra = split_run_options(options)
        if extra:
            raise TypeError(f"run_batch got unknown keyword(s): {', '.join(sorted(extra))}")
        if not batch_kwargs:
            return []
        backend = resolve_backend(backend)
        if prefill_prefix and len(batch_kwargs) > 1:
            prefix = self.shared_prefix(batch_kwargs, backend.role_template)
            if prefix:
                backend.generate(prefix, {"max_new_tokens": 0})
        workers = _num_threads(num_threads, len(batch_kwargs))
        states = [self._new_state(backend, sampling, logprob, False, prefill_prefix) for _ in batch_kwargs]
        bar = _progress(len(batch_kwargs)) if progress_bar else None

        def one(i: int) -> None:
            try:
                states[i].ret_value = self.func(states[i], **{**self.bound, **batch_kwargs[i]})
            finally:
                states[i]._exec.end()
                states[i]._exec.sync()
                if bar is not None:
                    bar.update(1)

        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="radixlm-batch") as pool:
                for future in [pool.submit(one, i) for i in range(len(states))]:
                    future.result()
        finally:
            if bar is not None:
                bar.close()
        return states

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

    def _new_state(self, backend, sampling, logprob, stream, prefill) -> ProgramState:
        return ProgramState(StreamExecutor(backend, sampling, logprob, stream=stream, prefill=prefill))

    def _run_streaming(self, state: ProgramState, args: tuple, program_args: dict) -> None:
        try:
            state.ret_value = self.func(state, *args, **{**self.bound, **program_args})
        except Exception as e:  # no caller to raise to: report through s.error()
            state._exec._fail(e)
        finally:
            state._exec.end()


def _common_prefix(a: str, b: str) -> str:
    return os.path.commonprefix([a, b])


def _num_threads(num_threads: int | str, n: int) -> int:
    if num_threads == "auto":
        return max(1, min(n, max(64, 16 * (os.cpu_count() or 1))))
    if not isinstance(num_threads, int) or isinstance(num_threads, bool) or num_threads < 1:
        raise ValueError(f"num_threads must be 'auto' or a positive integer, got {num_threads!r}")
    return num_threads


def _progress(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="run_batch")
