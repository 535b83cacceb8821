"""``build_cached``: build a directory once under the cache, atomically (no half-written checkpoint).

A build writes ``.building-<name>-<pid>-<random>`` and renames it into place; a build killed midway
(``kill -9``) leaves that folder behind, and :func:`building_dir` removes such folders whose process
is gone before it starts the next build (folders of an older layout, without a pid: after an hour).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def radixlm_cache() -> Path:
    """``$RADIXLM_CACHE`` or ``~/.cache/radixlm`` (the root of every cached artefact)."""
    return Path(os.environ.get("RADIXLM_CACHE") or Path.home() / ".cache" / "radixlm")

def build_cached(final: Path, build: Callable[[Path], object], done: Callable[[Path], bool] | None = None) -> str:
    """``final`` as a string, built by ``build(tmp_dir)`` first unless ``done(final)`` (default: it
    exists). The build goes to a temporary sibling renamed into place, so a reader never sees a
    half-written directory and two racing processes both end up with the same complete one."""
    done = done or Path.is_dir
    if done(final):
        return str(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = building_dir(final)
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


STALE_UNNAMED_S = 3600.0


def building_dir(final: Path) -> Path:
    """A new temporary sibling of ``final`` to build into, named after this process, once the
    stale ones of ``final`` are removed (see the module docstring)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_building(final)
    return Path(tempfile.mkdtemp(prefix=f".building-{final.name}-{os.getpid()}-", dir=final.parent))


def remove_stale_building(final: Path) -> list[Path]:
    """Delete ``final``'s build folders whose process is gone; returns them."""
    prefix = f".building-{final.name}-"
    removed = []
    for tmp in final.parent.glob(f"{prefix}*"):
        pid = tmp.name[len(prefix):].split("-", 1)[0]
        try:
            stale = not _alive(int(pid)) if pid.isdigit() else time.time() - tmp.stat().st_mtime > STALE_UNNAMED_S
        except FileNotFoundError:
            continue
        if stale:
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
