"""``GrammarBackendStart`` on a stand-in backend: one build, its state, a close before or after the
build ends (the backend shut down exactly once), and failures of the build or of the warm-up."""

from __future__ import annotations

import threading

import pytest
from radixlm.runtime.engine.grammar_compiler import GrammarBackendStart

pytestmark = pytest.mark.unit


class FakeBackend:
    def __init__(self) -> None:
        self.shutdowns = 0

    def shutdown(self) -> None:
        self.shutdowns += 1


def held_build(backends: list, release: threading.Event):
    def build():
        assert release.wait(60)
        backends.append(FakeBackend())
        return backends[-1]
    return build


def test_builds_once_then_warms_up():
    backends: list = []
    release = threading.Event()
    start = GrammarBackendStart(held_build(backends, release), lambda b: {"compile": "ok", "masks": 3})
    assert start.state()["state"] == "starting" and not start.future.done()
    release.set()
    assert start.join(60)
    assert start.future.result() is backends[0] and start.builds == 1 and len(backends) == 1
    state = start.state()
    assert state["state"] == "ready" and state["warm_up"] == {"compile": "ok", "masks": 3}
    assert state["ready_s"] is not None and state["error"] is None
    start.close()
    start.close()
    assert backends[0].shutdowns == 2  # GrammarBackend.shutdown is idempotent; close forwards each call


def test_close_during_the_build_shuts_the_backend_down_when_it_ends():
    backends: list = []
    release = threading.Event()
    warmed: list = []
    start = GrammarBackendStart(held_build(backends, release), warmed.append)
    start.close()  # returns while the build is held
    release.set()
    assert start.join(60)
    assert len(backends) == 1 and backends[0].shutdowns == 1 and not warmed
    assert start.state()["state"] == "failed" and "shut down" in start.state()["error"]
    with pytest.raises(RuntimeError):
        start.future.result()


def test_a_failed_build_is_reported():
    def build():
        raise OSError("no workers")

    start = GrammarBackendStart(build, None)
    assert start.join(60) and start.failed()
    assert start.state() == {"state": "failed", "ready_s": None, "warm_up": None, "error": "no workers"}
    start.close()


def test_a_failed_warm_up_leaves_the_backend_usable():
    def warm_up(backend):
        raise ValueError("walk failed")

    start = GrammarBackendStart(FakeBackend, warm_up)
    assert start.join(60)
    assert start.state()["state"] == "ready" and start.state()["warm_up"] == {"compile": "error"}
    assert isinstance(start.future.result(), FakeBackend)
