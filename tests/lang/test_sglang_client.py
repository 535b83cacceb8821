"""Acceptance (issue 17): SGLang's own frontend (``sgl.RuntimeEndpoint`` from the ``sglang``
package) runs DSL programs -- gen, streaming, select, fork, regex and typed gens, roles, batches,
flush_cache, get_server_info -- against a live radixlm server, with the same greedy output as our
engine gives for the same text.

The client is installed once by ``tests/sglang_client.py`` (``pip install --no-deps sglang`` and its
import-time packages, cached under ``$RADIXLM_CACHE``) and runs in a subprocess, so its packages
never enter this interpreter. Skipped, saying why, when it cannot be installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig
from sglang_client import FETCH_COMMAND, ClientUnavailable, install

import radixlm

PROGRAMS = Path(__file__).resolve().parents[1] / "sglang_client_programs.py"


@pytest.fixture(scope="module")
def client_path() -> Path:
    try:
        return install()
    except ClientUnavailable as e:
        pytest.skip(f"SGLang's client is not installable here ({e}); run `{FETCH_COMMAND}` online once")


@pytest.fixture(scope="module")
def results(client_path):
    engine = Engine(max_total_tokens=8192, random_seed=0)
    with BackgroundServer(engine, ServerConfig(port=0)) as srv:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(client_path), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, str(PROGRAMS), srv.url], capture_output=True, text=True,
                              env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        yield json.loads(done.stdout.strip().splitlines()[-1]), engine
    engine.shutdown()


def greedy(engine: Engine, prompt: str, max_tokens: int, **extra) -> str:
    return engine.generate(prompt, {"temperature": 0.0, "max_new_tokens": max_tokens, **extra})["text"]


def test_gen_and_streaming_match_the_engine(results):
    out, engine = results
    assert out["version"].startswith("0.5")
    want = greedy(engine, "The lighthouse keeper", 8, stop=["\n\n"])
    assert out["plain"] == want and out["stream_final"] == want
    assert len(out["stream_pieces"]) > 1 and "".join(out["stream_pieces"]) == want  # sliced by SGLang's client
    assert out["batch"] == [greedy(engine, p, 8, stop=["\n\n"]) for p in ("One:", "Two:")]


def test_select_fork_and_constrained_gens(results):
    out, engine = results
    assert out["select"] in ("red", "green", "blue")
    assert {"input_token_logprobs", "normalized_prompt_logprobs"} <= set(out["select_meta"])
    assert out["fork"] == [greedy(engine, f"Two ideas: idea {i}:", 5) for i in range(2)]
    assert re.fullmatch(r"[0-9]{3}", out["regex"]) and re.fullmatch(r"[-+]?[0-9]+[ \n]*", out["int"])
    assert isinstance(out["chat"], str) and out["chat"]


def test_server_calls(results):
    out, _ = results
    assert out["server_info_version"] == radixlm.__version__  # get_server_info reads /server_info
