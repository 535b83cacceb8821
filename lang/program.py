"""``SglFunction``: a decorated program and the ways to run it (once, in a batch, traced)."""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from radixlm.lang import ir
from radixlm.lang.batch import iter_results, normalize_arguments, num_workers, run_all
from radixlm.lang.default_backend import resolve_backend, set_default_backend
from radixlm.lang.interpreter import StreamExecutor
from radixlm.lang.state import ProgramState
from radixlm.lang.tracer import TracerState, trace

__all__ = ["SglFunction", "set_default_backend", "split_run_options"]

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
