"""Keep an engine's start-up objects out of Python's cyclic garbage collector.

Once torch is imported a process holds well over a hundred thousand objects the collector tracks,
and each full (generation-2) collection walks them all: a pause of tens of milliseconds, landing on
whichever decode step or grammar compile is running. Objects that exist when the engine has started
(the model, the tokenizer, torch's own) live as long as the engine, so ``gc.freeze()`` moves them
to the permanent generation and a full collection then walks only what was made since: SGLang and
vLLM do the same after start-up.

Engines nest (tests start several in one process): the objects stay frozen while any engine is
open, and ``gc.unfreeze()`` hands them back to the collector when the last one shuts down, so
the cycles of a closed engine are freed as before.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_open = 0


def freeze_startup_objects() -> None:
    """Collect once, then freeze every object that survives (one more open engine)."""
    global _open
    with _lock:
        _open += 1
        gc.collect()
        gc.freeze()


def thaw_startup_objects() -> None:
    """One engine fewer; with none left, give the frozen objects back to the collector."""
    global _open
    with _lock:
        _open = max(_open - 1, 0)
        if _open == 0:
            gc.unfreeze()
