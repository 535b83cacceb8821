"""``GrammarBackendStart``: the engine's grammar backend, built once, in a background thread.

Building a ``GrammarBackend`` costs seconds at a 152k-token vocabulary (the token table, the mask
filters' per-vocabulary tables, the compile workers' start, the native tokenizer): paid by the
first constrained request, and on the engine's thread, it stalled every request. Here one daemon
thread builds it, then warms it up (``warm_up_backend``: one compile through the pool and a
matcher walk); ``future`` resolves to the backend as soon as it can take compiles (before the
warm-up walk, which only fills caches the first request would otherwise fill). The engine starts
it at start-up (``--grammar-warmup``, the default) or on its first constrained request; either
way there is one backend, and a request that arrives early waits for what is still missing.

``close()`` never waits: a backend finished after it is shut down by the thread itself, and no
warm-up follows it. At interpreter exit the builds still running are closed and waited for
(``CLOSE_WAIT_S`` at most): a process that exits while the thread is inside native code (torch,
the tokenizer) aborts ("terminate called without an active exception").
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

logger = logging.getLogger(__name__)

CLOSE_WAIT_S = 60.0  # the longest exit waits for a build still running (a 152k vocabulary: seconds)
_RUNNING: weakref.WeakSet = weakref.WeakSet()  # every start whose thread may still run


@atexit.register
def _finish_running_starts() -> None:
    """Close every start and wait for its thread, so none is inside native code as the process ends."""
    for start in list(_RUNNING):
        start.close()
        start.join(CLOSE_WAIT_S)


class GrammarBackendStart:
    """One background build of a grammar backend; ``state()`` says where it stands."""

    def __init__(self, build: Callable[[], Any], warm_up: Callable[[Any], dict[str, Any]] | None) -> None:
        self.future: Future = Future()
        self.builds = 0  # backends built: at most one per start
        self._build = build
        self._warm_up = warm_up
        self._lock = threading.Lock()
        self._closed = False
        self._started_at = time.perf_counter()
        self._ready_s: float | None = None
        self._warm: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, name="grammar-backend-start", daemon=True)
        _RUNNING.add(self)
        self._thread.start()

    def _run(self) -> None:
        try:
            backend = self._build()
        except BaseException as e:  # noqa: BLE001 - reported to the waiting requests and in state()
            logger.exception("the grammar backend failed to start")
            self.future.set_exception(e)
            return
        with self._lock:  # close() reads the future under this lock: the backend is shut down once
            self.builds += 1
            closed = self._closed
            if not closed:
                self.future.set_result(backend)
        if closed:
            backend.shutdown()
            self.future.set_exception(RuntimeError("the engine shut down while the grammar backend started"))
            return
        if self._warm_up is not None and not self._closed:
            try:
                self._warm = self._warm_up(backend)
            except Exception:  # noqa: BLE001 - an optimisation: requests compile and mask regardless
                logger.exception("the grammar backend's warm-up failed")
                self._warm = {"compile": "error"}
        self._ready_s = time.perf_counter() - self._started_at
        logger.info("grammar backend ready in %.2f s (warm-up: %s)", self._ready_s, self._warm)

    def state(self) -> dict[str, Any]:
        """``state`` (``starting``, ``ready`` or ``failed``), ``ready_s`` (from start to ready,
        warm-up included), ``warm_up`` (what the warm-up did; None without one) and ``error``."""
        future = self.future
        if future.done() and future.exception() is not None:
            return {"state": "failed", "ready_s": None, "warm_up": None, "error": str(future.exception())}
        ready = self._ready_s
        return {"state": "starting" if ready is None else "ready",
                "ready_s": None if ready is None else round(ready, 3), "warm_up": self._warm, "error": None}

    def failed(self) -> bool:
        return self.future.done() and self.future.exception() is not None

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread (build and warm-up) to end; True if it did (for tests and benchmarks)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        """Shut the backend down (now if built, else when the build ends); returns at once."""
        with self._lock:
            self._closed = True
            built = self.future.done() and self.future.exception() is None
        if built:
            self.future.result().shutdown()
