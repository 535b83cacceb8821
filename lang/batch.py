"""``run_batch``: many runs of one program, concurrently, as a list or as a generator.

Every member runs on its own state in a thread pool, so their requests are in flight together and
the engine batches them. With ``generator_style=True`` the states are yielded in input order, each
as soon as it (and those before it) finished, as SGLang's generator does; the rest keep running.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any


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
