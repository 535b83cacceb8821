"""glibc malloc tuning: applied once on Linux, and the opt-out variable really opts out."""

from __future__ import annotations

import subprocess
import sys

from radixlm.runtime.model import memory_placement


def test_opt_out_changes_nothing(monkeypatch):
    monkeypatch.setenv(memory_placement.MALLOC_TUNING_DISABLE_ENV, "1")
    assert memory_placement._apply_malloc_tuning() is False


def test_tuning_applies_on_glibc_and_is_done_once():
    # CI and development machines are Linux/glibc, where tuning must succeed
    code = ("from radixlm.runtime.model import memory_placement as m\n"
            "first = m.tune_malloc()\n"
            "m._apply_malloc_tuning = lambda: (_ for _ in ()).throw(AssertionError('applied twice'))\n"
            "print(first, m.tune_malloc())\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != memory_placement.MALLOC_TUNING_DISABLE_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


# In a fresh process, tuned: a thread fills 40 MB of its arena, frees it (the blocks end in the
# arena's top), then reports its RSS drop from malloc_trim alone and from release_free_memory.
_THREAD_ARENA = """
import ctypes, os, threading
from radixlm.runtime.model import memory_placement as m
assert m.tune_malloc()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
out = []
def work():
    blocks = [libc.malloc(1 << 20) for _ in range(40)]
    for b in blocks:
        ctypes.memset(b, 1, 1 << 20)
    for b in reversed(blocks):
        libc.free(b)
    before = rss_mb()
    libc.malloc_trim(0)
    trimmed = rss_mb()
    assert m.release_free_memory()
    out.append((before - trimmed, trimmed - rss_mb()))
t = threading.Thread(target=work)
t.start()
t.join()
print(*out[0])
"""


def test_release_hands_back_a_thread_arenas_top():
    env = {k: v for k, v in __import__("os").environ.items() if k != memory_placement.MALLOC_TUNING_DISABLE_ENV}
    out = subprocess.run([sys.executable, "-c", _THREAD_ARENA], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    by_trim, by_release = (float(x) for x in out.stdout.split())
    assert by_trim < 10  # glibc's malloc_trim leaves a thread arena's top resident
    assert by_release > 30  # release_free_memory shrinks it
