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
from radixlm.runtime.router.launcher import replica_command
from radixlm.runtime.server_args import ServerArgs

from radixlm import launch_server
from radixlm.__main__ import build_parser, main
from radixlm.flags import notices


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
        ready = log.wait_for(r"on http://127\.0\.0\.1:(\d+)(.*)", timeout=120)
        port = int(ready.group(1))
        assert "RANDOM weights" in ready.group(2) and "--model-path" in ready.group(2)  # the default model
        url = f"http://127.0.0.1:{port}"
        out = json.loads(_post(url + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 3}}))
        assert out["meta_info"]["completion_tokens"] <= 3
        log.wait_for(r"/generate \S+ status=200 prompt_tokens=\d+ cached_tokens=\d+ completion_tokens=\d+ "
                     r"latency=[\d.]+ms", timeout=10)
        _post(url + "/generate", {"text": "hi", "rid": "client-7\nfake line", "sampling_params": {"max_new_tokens": 1}})
        log.wait_for(r"/generate \S+ rid='client-7\\nfake line' status=200", timeout=10)  # quoted: one line
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


# an SGLang launch command, as SGLang's docs write them
SGLANG_COMMAND = [
    "--model-path", "/models/llama", "--host", "0.0.0.0", "--port", "30001", "--tp-size", "1", "--dp-size", "1",
    "--max-running-requests", "8", "--max-total-tokens", "4096", "--chunked-prefill-size", "512",
    "--max-prefill-tokens", "2048", "--schedule-policy", "lpm", "--random-seed", "7", "--context-length", "1024",
    "--served-model-name", "llama", "--api-key", "sk-1", "--log-level", "info", "--mem-fraction-static", "0.7",
    "--chat-template", "chat.jinja", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3",
    "--grammar-backend", "xgrammar", "--enable-metrics", "--kv-cache-dtype", "bf16", "--log-requests",
    "--trust-remote-code", "--dtype", "bfloat16", "--page-size", "1", "--disable-radix-cache",
    "--strict-api", "--incremental-streaming-output", "--enable-torch-compile", "--stream-interval", "2",
]


def test_sglang_launch_command_parses_with_a_notice_per_ignored_flag():
    ns = build_parser().parse_args(["serve", *SGLANG_COMMAND])
    args = ServerArgs.from_cli_args(ns)
    assert (args.model_path, args.mem_fraction, args.max_total_tokens, args.random_seed) == ("/models/llama", 0.7,
                                                                                             4096, 7)
    assert (args.chat_template, args.tool_call_parser, args.reasoning_parser) == ("chat.jinja", "hermes", "qwen3")
    assert (args.grammar_backend, args.strict_api, args.incremental_streaming_output) == ("xgrammar", True, True)
    assert args.kv_cache_dtype == "bfloat16"  # SGLang's spelling
    assert (ns.host, ns.port, ns.dp_size, ns.served_model_name, ns.api_key) == ("0.0.0.0", 30001, 1, ["llama"],
                                                                                ["sk-1"])
    lines = notices(ns)
    for flag in ("--enable-metrics", "--trust-remote-code", "--enable-torch-compile", "--stream-interval 2"):
        assert sum(line.startswith(f"radixlm: notice: {flag} has no effect: ") for line in lines) == 1, flag
    assert len(lines) == 4
    # --kv-cache-dtype is a real flag: no notice
    assert notices(build_parser().parse_args(["serve", "--kv-cache-dtype", "auto"])) == []


def test_launch_server_is_radixlm_serve(capsys):
    with pytest.raises(SystemExit) as exc:
        launch_server.main(["--help"])
    assert exc.value.code == 0
    alias = capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert alias == capsys.readouterr().out and "--mem-fraction-static" in alias


def test_serve_help_prints_each_default_once(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    entries = re.split(r"\n  (?=-)", out)  # one entry per option
    assert len(entries) > 40
    for entry in entries:
        assert entry.count("(default") <= 1, entry
        assert "(default: None)" not in entry, entry


@pytest.mark.parametrize("layout", ["clone", "package", "runtime", "lang"])
def test_replicas_start_whatever_the_current_directory_holds(tmp_path, layout):
    """``--dp-size`` replicas run the installed radixlm even from a folder holding a clone named
    ``radixlm/`` (a namespace package there) or a package that shadows one (``radixlm``, ``runtime``)."""
    if layout == "clone":  # the repository layout: no __init__.py at its root
        (tmp_path / "radixlm" / "runtime").mkdir(parents=True)
        (tmp_path / "radixlm" / "pyproject.toml").write_text("")
    else:
        name = {"package": "radixlm"}.get(layout, layout)
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('the shadowing folder was imported')\n")
    proc = subprocess.run([*replica_command(), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--model-path" in proc.stdout, proc.stderr
    if layout in ("clone", "package"):  # the bug this guards against: `python -m radixlm` imports the folder
        naive = subprocess.run([sys.executable, "-m", "radixlm", "serve", "--help"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=120)
        assert naive.returncode != 0


def test_unknown_flag_names_the_closest_ones(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--max-totl-tokens", "5"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" not in err  # one error line and a pointer to --help, not the whole usage
    assert err.startswith("radixlm: error: unrecognized arguments: --max-totl-tokens 5 (did you mean "
                          "--max-total-tokens")
    assert err.splitlines()[-1] == "radixlm: 'radixlm serve --help' lists the flags"  # the subcommand's
    with pytest.raises(SystemExit):
        main(["generate", "hi", "--zzz"])
    assert "unrecognized arguments: --zzz\n" in capsys.readouterr().err  # nothing close: no hint


@pytest.mark.parametrize("argv", [["serve", "--bogus-flag"], ["serve", "--port", "99999"],
                                  ["serve", "--quantization", "fp4"], ["generate", "hi", "--max-new-tokens", "x"],
                                  ["nosuchcommand"]])
def test_a_bad_flag_is_one_error_line_and_a_pointer_to_help(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("radixlm: error: "), lines
    assert lines[1].endswith("--help' lists the flags"), lines


def test_cuda_graph_flags_are_real_flags_not_ignored_ones(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "runs no CUDA graphs" not in out and "--cuda-graph-max-bs" in out


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    import radixlm.__main__ as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_generate", interrupted)
    assert cli.main(["generate", "hi"]) == 130
    assert capsys.readouterr().err == "radixlm: interrupted\n"


def test_generate_on_the_embedded_model_says_its_weights_are_random():
    run = subprocess.run([sys.executable, "-m", "radixlm", "generate", "hi", "--max-new-tokens", "2",
                          "--max-total-tokens", "1024"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "radixlm: notice: the embedded tiny model has RANDOM weights" in run.stderr
    assert " INFO " not in run.stderr  # generate's output is the text


def test_real_gguf_has_a_help_and_names_its_models():
    module = "radixlm.runtime.testing.real_gguf"
    shown = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "qwen2.5-coder-0.5b-instruct-q4_k_m" in shown.stdout, shown.stderr
    bad = subprocess.run([sys.executable, "-m", module, "no-such-model"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "unknown model 'no-such-model'" in bad.stderr


def test_the_trust_remote_code_notice_names_every_built_in_family():
    from radixlm.runtime.model.architectures import SUPPORTED_ARCHITECTURES

    from radixlm.flags import IGNORED_FLAGS

    notice = IGNORED_FLAGS["--trust-remote-code"][1].replace(" ", "")
    for arch in SUPPORTED_ARCHITECTURES:
        assert arch.split("For")[0] in notice, arch
