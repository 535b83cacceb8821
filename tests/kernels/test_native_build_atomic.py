"""The native kernels' build is atomic (issue 47, item 10): a process killed (``kill -9``) while the
compiler runs leaves no ``.so`` behind, only a temp file that the next build removes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

HANG_GUARD_S = 120.0  # a guard only: the wait ends when the fake compiler has started
FAKE_CC = """#!/bin/sh
# a stand-in compiler: writes its -o file; with HANG_MARK set, writes half of it and hangs
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
if [ -n "$HANG_MARK" ]; then echo partial > "$out"; echo $$ > "$HANG_MARK.tmp"; mv "$HANG_MARK.tmp" "$HANG_MARK"; exec sleep 600; fi
echo built > "$out"
"""


def _build(env: dict[str, str]) -> subprocess.Popen:
    code = "from radixlm.kernels.cpu_native import build; print(build())"
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)


def test_a_build_killed_midway_leaves_no_library(tmp_path: Path):
    cc = tmp_path / "fake-cc"
    cc.write_text(FAKE_CC)
    cc.chmod(cc.stat().st_mode | stat.S_IEXEC)
    mark = tmp_path / "compiler-started"
    env = {**os.environ, "RADIXLM_CACHE": str(tmp_path / "cache"), "CC": str(cc), "HANG_MARK": str(mark)}
    proc = _build(env)
    try:
        end = time.monotonic() + HANG_GUARD_S
        while not mark.exists():
            assert proc.poll() is None and time.monotonic() < end, "the fake compiler never started"
            time.sleep(0.02)
        proc.kill()  # SIGKILL while the compiler writes: no finally block runs
        proc.wait()
    finally:
        if mark.exists():
            os.kill(int(mark.read_text()), signal.SIGKILL)
    native = tmp_path / "cache" / "native"
    assert [p.name for p in native.glob("*.so")] == []  # nothing a loader could pick up half-written
    assert len(list(native.glob("*.part"))) == 1
    del env["HANG_MARK"]
    again = _build(env)
    out, _ = again.communicate(timeout=HANG_GUARD_S)
    assert again.returncode == 0
    built = Path(out.strip())
    assert built.read_text() == "built\n" and [p.name for p in native.iterdir()] == [built.name]


FAMILY_CC = """#!/bin/sh
# a stand-in compiler with a child of its own (as cc runs cc1, as and ld): both pids recorded, both hang
sleep 600 & echo $! > "$FAMILY_MARK.child"
echo $$ > "$FAMILY_MARK.tmp"; mv "$FAMILY_MARK.tmp" "$FAMILY_MARK"
wait
"""
POLLS = 2400  # 0.05 s apart: a hang guard, not a timing assertion


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a container's init may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_the_compiler_and_its_children_die_with_the_server(tmp_path: Path):
    cc = tmp_path / "family-cc"
    cc.write_text(FAMILY_CC)
    cc.chmod(cc.stat().st_mode | stat.S_IEXEC)
    mark = tmp_path / "family"
    env = {**os.environ, "RADIXLM_CACHE": str(tmp_path / "cache"), "CC": str(cc), "FAMILY_MARK": str(mark)}
    proc = _build(env)
    pids = []
    try:
        end = time.monotonic() + HANG_GUARD_S
        while not mark.exists():
            assert proc.poll() is None and time.monotonic() < end, "the fake compiler never started"
            time.sleep(0.02)
        pids = [int(mark.read_text()), int(Path(f"{mark}.child").read_text())]
        assert all(_running(pid) for pid in pids)
        proc.kill()  # SIGKILL: the server cannot clean up
        proc.wait()
        for _ in range(POLLS):
            if not any(_running(pid) for pid in pids):
                break
            time.sleep(0.05)
        left = [pid for pid in pids if _running(pid)]
    finally:
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
    assert left == [], left
