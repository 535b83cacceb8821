"""Loading shows its work: a tqdm bar per phase on a terminal, one INFO line per phase otherwise."""

from __future__ import annotations

import io
import logging
import sys
from pathlib import Path

import pytest
from radixlm.runtime import load_progress
from radixlm.runtime.checkpoints.synthetic import default_model_path
from radixlm.runtime.load_progress import load_phase
from radixlm.runtime.model.gguf_loader import load_gguf_model
from radixlm.runtime.model.model_loader import load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gguf_files import write_gguf  # noqa: E402


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _phase_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "radixlm.loading"]


@pytest.mark.unit
def test_a_phase_is_a_bar_on_a_terminal_and_one_line_elsewhere(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="radixlm.loading")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with load_phase("loading weights (x.gguf)", 3_000_000, "B") as bar:
        for _ in range(3):
            bar.update(1_000_000)
    assert "loading weights (x.gguf)" in terminal.getvalue() and "3.00M" in terminal.getvalue()
    assert not _phase_lines(caplog)  # the bar says it: no log line on a terminal
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    with load_phase("loading weights (x.gguf)", 3_000_000, "B") as bar:
        for _ in range(3):
            bar.update(1_000_000)
    with load_phase("converting", None):
        pass
    assert plain.getvalue() == ""  # no bar, no per-unit output
    assert _phase_lines(caplog) == ["loading weights (x.gguf) (3.0 MB)", "converting"]
    with load_phase("rank 1", 10, show=False):
        pass
    assert len(_phase_lines(caplog)) == 2


@pytest.mark.unit
def test_an_uncounted_phase_redraws_its_elapsed_time(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(load_progress, "REFRESH_S", 0.01)
    redrawn = []
    original = load_progress.tqdm.refresh

    def refresh(self, *args, **kwargs):
        redrawn.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(load_progress.tqdm, "refresh", refresh)
    with load_phase("converting the tokenizer", None):
        while len(redrawn) < 3:  # counted, not timed: the ticker redraws while the phase runs
            pass
    assert "converting the tokenizer" in terminal.getvalue()


def test_loading_a_checkpoint_logs_one_line_per_phase(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    caplog.set_level(logging.INFO, logger="radixlm.loading")
    load_model(default_model_path(), dtype="float32")
    lines = _phase_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("loading weights (1 safetensors file) (")
    assert lines[0].endswith(" tensors)")
    caplog.clear()
    gguf = write_gguf(default_model_path(), tmp_path / "tiny.gguf")
    load_gguf_model(gguf, dtype="auto")
    lines = _phase_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("loading weights (tiny.gguf) (") and lines[0].endswith(" MB)")
