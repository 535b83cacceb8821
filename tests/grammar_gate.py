"""``Gate``: holds the engine's grammar-backend build until the test opens it (an engine caught
mid-start, with no timing); ``in_thread``: a call run in a thread, its result or error kept."""

from __future__ import annotations

import threading

import pytest
from radixlm.runtime.engine.grammar_compiler import GrammarCompiler


class Gate:
    """Holds ``GrammarCompiler._build_backend`` until ``open()``; keeps what it built."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.event = threading.Event()
        self.entered = threading.Event()
        self.built: list = []
        original = GrammarCompiler._build_backend

        def gated(compiler: GrammarCompiler):
            self.entered.set()
            assert self.event.wait(120), "the test never opened the gate"
            backend = original(compiler)
            self.built.append(backend)
            return backend

        monkeypatch.setattr(GrammarCompiler, "_build_backend", gated)

    def open(self) -> None:
        self.event.set()


def in_thread(fn, *args):
    """Run ``fn(*args)`` in a thread; returns (thread, box) where box holds its result or error."""
    box: dict = {}

    def run():
        try:
            box["result"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box
