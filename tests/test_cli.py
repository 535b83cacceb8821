"""The ``radixlm`` command line: help, one-shot generate, and ``serve`` with graceful shutdown."""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from radixlm.runtime.server_args import ServerArgs

from radixlm.__main__ import main


def test_help_lists_subcommands_and_every_server_arg(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "serve" in out and "generate" in out
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    for flag in ("--host", "--port", "--api-key", "--max-body-bytes"):
        assert flag in out
    for f in dataclasses.fields(ServerArgs):
        assert "--" + f.name.replace("_", "-") in out, f.name
    assert main([]) == 2


def test_bad_flags_exit_with_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--schedule-policy", "random"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["generate", "hi", "--temperature", "-1"])
    assert exc.value.code == 2 and "temperature" in capsys.readouterr().err


def test_generate_prints_the_text(capsys):
    assert main(["generate", "The keeper climbed", "--max-new-tokens", "4", "--show-meta"]) == 0
    captured = capsys.readouterr()
    meta = json.loads(captured.err.strip().splitlines()[-1])
    assert meta["completion_tokens"] <= 4 and captured.out.endswith("\n")


class _Lines(threading.Thread):
    """Collects a pipe's lines in the background."""

    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe, self.lines = pipe, []

    def run(self):
        for line in self.pipe:
            self.lines.append(line.decode(errors="replace"))

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(pattern, line)
                if m:
                    return m
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not seen in:\n{''.join(self.lines)}")


def _post(url: str, body: dict, timeout: float = 60) -> bytes:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read()


def test_serve_logs_requests_and_exits_0_on_sigterm():
    proc = subprocess.Popen([sys.executable, "-m", "radixlm", "serve", "--port", "0", "--graceful-shutdown-s",
                             "1", "--max-total-tokens", "8192"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    log = _Lines(proc.stderr)
    log.start()
    try:
        port = int(log.wait_for(r"on http://127\.0\.0\.1:(\d+)", timeout=120).group(1))
        url = f"http://127.0.0.1:{port}"
        out = json.loads(_post(url + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 3}}))
        assert out["meta_info"]["completion_tokens"] <= 3
        log.wait_for(r"/generate \S+ status=200 prompt_tokens=\d+ cached_tokens=\d+ completion_tokens=\d+ "
                     r"latency=[\d.]+ms", timeout=10)
        # a long request in flight when the signal arrives is finished or aborted, never left hanging
        result = {}
        body = {"text": "go on", "stream": True, "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}
        worker = threading.Thread(target=lambda: result.setdefault("body", _safe_post(url + "/generate", body)))
        worker.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        worker.join(timeout=10)
        assert not worker.is_alive()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _safe_post(url: str, body: dict) -> bytes | str:
    try:
        return _post(url, body)
    except Exception as e:  # noqa: BLE001 - the connection may be cut by the shutdown
        return repr(e)
