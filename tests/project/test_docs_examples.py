"""Every ```bash and ```python block of README.md and docs/*.md runs as written, so the docs cannot rot.

Every structured example (a block that builds ``schema``; a curl body with a ``json_schema``) has
its output parsed and validated against its schema, and must end on its own (``stop``): the docs'
budgets fit the schema's longest document.

Blocks not meant to run use another fence (```text, or none). The blocks run against a live server
on the tiny model (``localhost:30000`` in a block means it; the port is swapped for the test's):

- python: executed in order, each document's blocks sharing one namespace (a fragment such as the
  ``response_format`` example uses the ``client`` an earlier block made); ``engine`` is always a
  running engine, for fragments that use one.
- bash: ``curl`` runs (with ``--fail-with-body``: an HTTP error fails the test); ``radixlm generate``
  runs; ``radixlm serve`` / ``router`` / ``bench`` and ``python -m radixlm.launch_server`` lines are
  parsed by the real parser (they would block); a benchmark script must accept its flags
  (``--help``); installs and the test run itself are only checked to name files that exist.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

from radixlm.__main__ import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
PARSED_ONLY = ("serve", "router", "bench")  # radixlm subcommands that would block or run for minutes
NOT_RUN = ("pip", "bash", "git")  # installs and CI scripts: checked for the files they name
SCHEMA_BLOCK = re.compile(r"^schema = ", re.M)  # a structured example: its result is ``out``


def blocks(path: Path, lang: str) -> list[tuple[int, str]]:
    """(line number, source) of each ```lang block of ``path``."""
    text = path.read_text(encoding="utf-8")
    return [(text[:m.start()].count("\n") + 1, m.group(2)) for m in FENCE.finditer(text) if m.group(1) == lang]


def bash_commands(source: str) -> list[str]:
    """The commands of a bash block: continuations joined, comments and blank lines dropped, ``&&``
    chains split; a quoted string may span lines (a curl body)."""
    commands = []
    for line in _logical_lines(re.sub(r"\\\n\s*", " ", source)):
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            commands.append(shlex.join(words[:cut]))
            words = words[cut + 1:]
    return [c for c in commands if c]


def _logical_lines(text: str) -> list[str]:
    """``text`` cut at the newlines outside quotes."""
    lines, start, quote = [], 0, None
    for i, ch in enumerate(text):
        if quote == "\n" and ch == "\n":  # the end of a comment (its quotes were not quotes)
            quote = None
        elif quote:
            quote = None if ch == quote else quote
            continue
        elif ch in "'\"":
            quote = ch
            continue
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            quote = "\n"
            continue
        if ch == "\n":
            lines.append(text[start:i])
            start = i + 1
    return [*lines, text[start:]]


@pytest.fixture(scope="module")
def live():
    engine = Engine(max_total_tokens=8192)
    with BackgroundServer(engine, ServerConfig(port=0)) as srv:
        yield engine, srv.port
    engine.shutdown()


def _at_port(text: str, port: int) -> str:
    return re.sub(r"(localhost|127\.0\.0\.1):30000", rf"\g<1>:{port}", text)


def test_every_doc_has_been_looked_at():
    """Guard against a silent zero: the docs do hold blocks this test runs."""
    assert sum(len(blocks(p, "python")) for p in DOCS) >= 6
    assert sum(len(blocks(p, "bash")) for p in DOCS) >= 6
    cmds = [c for p in DOCS for _, b in blocks(p, "bash") for c in bash_commands(b)]
    assert any(c.startswith("curl") for c in cmds) and any(c.startswith("radixlm serve") for c in cmds)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_python_blocks_run(doc: Path, live, monkeypatch: pytest.MonkeyPatch):
    engine, port = live
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": "__docs__"}
    for line, source in blocks(doc, "python"):
        namespace["engine"] = engine
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(_at_port(source, port), f"{doc.name}:{line}", "exec"), namespace)  # noqa: S102
        except Exception as e:  # noqa: BLE001 - report which block failed
            pytest.fail(f"{doc.name} line {line}: {type(e).__name__}: {e}\n{source}")
        if SCHEMA_BLOCK.search(source):
            _check_structured(namespace["out"], namespace["schema"], f"{doc.name} line {line}")
    # a block may have shut down the shared engine's peers, never the shared engine itself
    assert engine.generate("still alive", {"max_new_tokens": 1})["meta_info"]["completion_tokens"] <= 1


def _check_structured(out, schema: dict, where: str) -> None:
    """``out`` (an engine result or a chat completion) ended on its own and validates against ``schema``."""
    if isinstance(out, dict):
        text, reason = out["text"], out["meta_info"]["finish_reason"]["type"]
    else:
        text, reason = out.choices[0].message.content, out.choices[0].finish_reason
    assert reason == "stop", f"{where}: the budget does not fit the schema ({reason}): {text!r}"
    jsonschema.validate(json.loads(text), schema)


def _curl_schema(words: list[str]) -> dict | None:
    """The JSON schema a curl command's ``-d`` body sends to ``/generate``, if any."""
    if "-d" not in words:
        return None
    body = json.loads(words[words.index("-d") + 1])
    return (body.get("sampling_params") or {}).get("json_schema")


def _run_bash(command: str, port: int) -> None:
    words = shlex.split(command)
    while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value prefixes
        words = words[1:]
    name = words[0]
    if name == "curl":
        if shutil.which("curl") is None:
            pytest.skip("curl is not installed")
        words = [_at_port(w, port) for w in words]
        proc = subprocess.run(["curl", "--fail-with-body", "--max-time", "120", *words[1:]],
                              capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
        schema = _curl_schema(words)
        if schema is not None:
            out = json.loads(proc.stdout)
            _check_structured(out if isinstance(out, dict) else out[0], schema, command)
    elif name == "radixlm" and words[1] in PARSED_ONLY and "--help" not in words:
        build_parser().parse_args(words[1:])  # SystemExit(2) on a flag that does not exist
    elif name == "radixlm":
        proc = subprocess.run([sys.executable, "-m", "radixlm", *words[1:]], capture_output=True, text=True,
                              timeout=300, cwd=ROOT)
        assert proc.returncode == 0, (command, proc.stderr)
    elif name in ("python", "python3") and words[1:3] == ["-m", "radixlm.launch_server"]:
        build_parser().parse_args(["serve", *words[3:]])
    elif name in ("python", "python3") and words[1:3] == ["-m", "pytest"]:
        assert (ROOT / "tests").is_dir()
    elif name in ("python", "python3"):
        script = ROOT / words[1]
        assert script.is_file(), command
        proc = subprocess.run([sys.executable, str(script), *words[2:], "--help"], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 0, (command, proc.stderr)
    elif name in NOT_RUN:
        for word in words[1:]:
            if "/" in word and not word.startswith(("-", "http")):
                assert (ROOT / word).exists(), (command, word)
    else:
        pytest.fail(f"no rule to check {command!r}: give the block another fence if it is not meant to run")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_bash_blocks_run(doc: Path, live):
    _, port = live
    for line, source in blocks(doc, "bash"):
        for command in bash_commands(source):
            try:
                _run_bash(command, port)
            except AssertionError as e:
                pytest.fail(f"{doc.name} line {line}: {command}\n{e}")
