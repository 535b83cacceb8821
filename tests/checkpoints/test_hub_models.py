"""``--model-path ORG/NAME[@REVISION]``: hub ids downloaded through a loopback stand-in for the hub.

The CLI runs in a subprocess with ``HF_ENDPOINT`` pointing at ``tests/fake_hub.py`` and ``HF_HOME``
in a temporary folder, so nothing reaches the network and the user's cache is untouched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from radixlm.runtime.checkpoints.model_source import (
    HUB_FILES,
    ModelSourceError,
    is_hub_id,
    resolve_model_path,
)
from radixlm.runtime.checkpoints.synthetic import default_model_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fake_hub import FakeHub  # noqa: E402

REPO = "test-org/tiny"


def _generate(spec: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "radixlm", "generate", "Hello", "--model-path", spec, "--max-new-tokens", "3"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture()
def hub_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {**env, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}


@pytest.fixture()
def repo_folder(tmp_path: Path) -> Path:
    """The embedded checkpoint plus files serving does not need (they must not be downloaded)."""
    folder = tmp_path / "repo"
    folder.mkdir()
    for f in Path(default_model_path()).iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    (folder / "README.md").write_text("# a model card\n")
    (folder / "pytorch_model.bin").write_bytes(b"\0" * 64)
    return folder


def test_hub_id_downloads_only_what_serving_needs_then_runs_offline(repo_folder, hub_env):
    with FakeHub({REPO: repo_folder}) as hub:
        env = {**hub_env, "HF_ENDPOINT": hub.url}
        first = _generate(REPO, env)
        assert first.returncode == 0, first.stderr
        fetched = {r.rsplit("/", 1)[-1] for r in hub.requests if r.startswith("GET") and "/resolve/" in r}
        assert "README.md" not in fetched and "pytorch_model.bin" not in fetched
        assert {"config.json", "tokenizer.json", "model.safetensors"} <= fetched
        pinned = _generate(f"{REPO}@main", env)
        assert pinned.returncode == 0, pinned.stderr
        assert pinned.stdout == first.stdout
    # the hub is gone: the cached snapshot serves, with HF_HUB_OFFLINE and without it
    for extra in ({"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": hub.url}, {"HF_ENDPOINT": hub.url}):
        again = _generate(REPO, {**hub_env, **extra})
        assert again.returncode == 0, again.stderr
        assert again.stdout == first.stdout
    snapshots = list((Path(hub_env["HF_HOME"]) / "hub").glob("models--test-org--tiny/snapshots/*"))
    assert len(snapshots) == 1 and (snapshots[0] / "config.json").is_file()


@pytest.mark.parametrize(("spec", "message"), [
    ("test-org/missing", "no such repository"),
    ("test-org/gated", "gated: accept its terms"),
    (f"{REPO}@v9", "no revision 'v9' in test-org/tiny"),
])
def test_hub_failures_are_one_line(repo_folder, hub_env, spec, message):
    with FakeHub({REPO: repo_folder}, gated=("test-org/gated",)) as hub:
        run = _generate(spec, {**hub_env, "HF_ENDPOINT": hub.url})
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert lines[-1].startswith(f"radixlm: error: --model-path {spec}: ") and message in lines[-1]
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("offline", [True, False])
def test_uncached_hub_id_without_network_says_what_to_do(hub_env, offline):
    env = {**hub_env, "HF_ENDPOINT": "http://127.0.0.1:9"}  # nothing listens on the discard port
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    run = _generate(REPO, env)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("radixlm: error: --model-path test-org/tiny: not in the Hugging Face cache")
    assert ("HF_HUB_OFFLINE is set" if offline else "cannot be reached") in last


@pytest.mark.unit
def test_what_counts_as_a_hub_id(tmp_path):
    assert is_hub_id("Qwen/Qwen2.5-0.5B-Instruct") and is_hub_id("org/name@v1.0") and is_hub_id("o/n@refs/pr/1")
    local = tmp_path / "org"
    (local / "name").mkdir(parents=True)
    assert not is_hub_id(str(local / "name"))
    assert not is_hub_id("./org/name") and not is_hub_id("a/b/c") and not is_hub_id("name")
    assert resolve_model_path(str(local / "name")) == str(local / "name")
    with pytest.raises(ModelSourceError, match="no such file or directory"):
        resolve_model_path(str(tmp_path / "missing" / "x" / "y"))
    assert "*.safetensors" in HUB_FILES and "tokenizer.json" in HUB_FILES
