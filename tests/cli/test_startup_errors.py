"""``radixlm serve`` start-up failures: one ``radixlm: error:`` line on stderr, exit code 2, no traceback.

Each case runs the real command in a subprocess, as a user would."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from radixlm.runtime.checkpoints.synthetic import default_model_path


def _serve(*flags: str, cwd: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "radixlm", "serve", *flags], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("radixlm: error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


@pytest.fixture()
def broken_checkpoint(tmp_path: Path) -> Path:
    """The tiny checkpoint with its weights file replaced by junk."""
    path = tmp_path / "broken"
    shutil.copytree(default_model_path(), path)
    for weights in path.glob("*.safetensors"):
        weights.write_bytes(b"not a safetensors file")
    return path


def test_port_in_use_is_reported_before_the_model_loads(broken_checkpoint: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # the checkpoint is broken too: the port message shows the port was checked first
        proc = _serve("--port", str(port), "--model-path", str(broken_checkpoint), "--trust-remote-code")
    line = _one_error_line(proc)
    assert f"port {port}" in line and "already in use" in line, line
    # SGLang's flag is accepted, with its notice
    assert "radixlm: notice: --trust-remote-code has no effect" in proc.stderr


@pytest.mark.parametrize("kind, expect", [
    ("missing", "no such file or directory"), ("file", "not a directory"), ("empty dir", "config.json is missing")])
def test_model_path_that_is_no_checkpoint(tmp_path: Path, kind: str, expect: str):
    path = {"missing": tmp_path / "missing", "file": tmp_path / "file.txt", "empty dir": tmp_path}[kind]
    if kind == "file":
        path.write_text("x")
    line = _one_error_line(_serve("--port", "0", "--model-path", str(path), timeout=60))
    assert expect in line, line


def test_broken_checkpoint_is_one_line(broken_checkpoint: Path):
    line = _one_error_line(_serve("--port", "0", "--model-path", str(broken_checkpoint)))
    assert f"cannot load {broken_checkpoint}" in line, line


def test_missing_chat_template_file_is_one_line(tmp_path: Path):
    line = _one_error_line(_serve("--port", "0", "--chat-template", str(tmp_path / "none.jinja")))
    assert "none.jinja" in line and "no such file" in line, line


@pytest.mark.parametrize("hub_id", ["org/" + "n" * 100, "org/a--b", "org/a..b"])
def test_an_invalid_hub_id_is_one_line(hub_id: str, tmp_path: Path):
    line = _one_error_line(_serve("--port", "0", "--model-path", hub_id, cwd=tmp_path, timeout=60))
    assert f"--model-path {hub_id}: not a valid hub id" in line, line


def test_a_gguf_file_of_random_bytes_fails_on_its_magic(tmp_path: Path):
    import random

    path = tmp_path / "noise.gguf"
    path.write_bytes(random.Random(0).randbytes(1 << 20))
    line = _one_error_line(_serve("--port", "0", "--model-path", str(path), timeout=60))
    assert "magic: not a GGUF file" in line and "converting" not in line, line
