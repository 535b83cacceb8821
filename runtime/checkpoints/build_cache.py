"""``build_cached``: build a directory once under the cache, atomically (no half-written checkpoint)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def build_cached(final: Path, build: Callable[[Path], object], done: Callable[[Path], bool] | None = None) -> str:
    """``final`` as a string, built by ``build(tmp_dir)`` first unless ``done(final)`` (default: it
    exists). The build goes to a temporary sibling renamed into place, so a reader never sees a
    half-written directory and two racing processes both end up with the same complete one."""
    done = done or Path.is_dir
    if done(final):
        return str(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".building-{final.name}-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # a real failure, not a lost race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(final)
