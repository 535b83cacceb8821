"""How a start-up phase shows its work: a tqdm bar on a terminal, one log line otherwise.

Loading a model has phases that take seconds each (the weights, a GGUF tokenizer's conversion, a
split GGUF's merge). :func:`load_phase` wraps one: when stderr is a terminal it draws a tqdm bar
over the phase's units (tensors, bytes), or, for a phase with no count, its elapsed time refreshed
twice a second; when stderr is not a terminal (a log file, a service) it writes one INFO line on
``radixlm.loading`` as the phase starts, and nothing per unit.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm.auto import tqdm

logger = logging.getLogger("radixlm.loading")

REFRESH_S = 0.5  # an uncounted phase's elapsed time is redrawn this often


def on_terminal() -> bool:
    """True when progress bars can be drawn (stderr is a terminal)."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def load_phase(desc: str, total: int | None = None, unit: str = "tensor", *, show: bool = True) -> Iterator[tqdm]:
    """A phase named ``desc`` of ``total`` ``unit`` (``"B"``: bytes, scaled); yields the bar to
    ``update``. ``show=False`` (a non-zero tensor-parallel rank) draws and logs nothing."""
    bar_on = show and on_terminal()
    if show and not bar_on:
        size = "" if total is None else f" ({_amount(total, unit)})"
        logger.info("%s%s", desc, size)
    bar_format = None if total is not None else "{desc}: {elapsed}"
    bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", leave=False, disable=not bar_on,
               bar_format=bar_format, file=sys.stderr)
    stop = threading.Event()
    ticker = None
    if bar_on and total is None:
        ticker = threading.Thread(target=_tick, args=(bar, stop), daemon=True, name="radixlm-load-progress")
        ticker.start()
    try:
        yield bar
    finally:
        stop.set()
        if ticker is not None:
            ticker.join()
        bar.close()


def _tick(bar: tqdm, stop: threading.Event) -> None:
    while not stop.wait(REFRESH_S):
        bar.refresh()


def _amount(total: int, unit: str) -> str:
    if unit == "B":
        return f"{total / 1e6:,.1f} MB"
    return f"{total:,} {unit}{'s' if total != 1 else ''}"
