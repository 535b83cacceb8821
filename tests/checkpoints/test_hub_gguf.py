"""GGUF models from the hub: ``ORG/NAME:QUANT`` and ``ORG/NAME/FILE.gguf``, ``radixlm pull`` and ``list``.

A GGUF repository (one file per quantization, a split model, a vision projector) is served by the
loopback stand-in for the hub (``tests/fake_hub.py``); the CLI runs in subprocesses with
``HF_ENDPOINT`` pointing at it and ``HF_HOME``/``RADIXLM_CACHE`` in a temporary folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from radixlm.runtime.checkpoints.model_source import (
    SplitGGUFError,
    _models,
    _pick,
    merge_split_gguf,
    parse_hub_spec,
)
from radixlm.runtime.checkpoints.synthetic import default_model_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fake_hub import FakeHub  # noqa: E402
from gguf_files import write_gguf  # noqa: E402

REPO = "test-org/tiny-GGUF"


def _radixlm(*argv: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "radixlm", *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def gguf_repo(tmp_path_factory) -> Path:
    """One file per quantization, a model split in two parts, a projector, and Q4_0 twice."""
    folder = tmp_path_factory.mktemp("repo")
    model = default_model_path()
    write_gguf(model, folder / "tiny-Q8_0.gguf", {"embed_tokens.weight": T.Q8_0, "q_proj.weight": T.Q8_0})
    write_gguf(model, folder / "tiny-F32.gguf")
    (folder / "F32").mkdir()  # split parts in a folder of their own, as bartowski's repositories hold them
    write_gguf(model, folder / "F32" / "tiny-F32.gguf", split_max_tensors=3)  # tiny-F32-0000{1..N}-of-0000N.gguf
    write_gguf(model, folder / "tiny-Q4_0.gguf", {"v_proj.weight": T.Q4_0})
    (folder / "extra").mkdir()
    (folder / "extra" / "tiny-Q4_0.gguf").write_bytes((folder / "tiny-Q4_0.gguf").read_bytes())
    (folder / "mmproj-tiny-Q8_0.gguf").write_bytes(b"GGUF" + b"\0" * 60)  # a vision projector: never picked
    (folder / "README.md").write_text("# GGUF files\n")
    whole = tmp_path_factory.mktemp("whole") / "tiny-F32.gguf"
    (folder / "tiny-F32.gguf").rename(whole)  # the unsplit file, outside the repository, to compare with
    return folder


@pytest.fixture()
def hub_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return {**env, "HF_HOME": str(tmp_path / "hf"), "RADIXLM_CACHE": str(tmp_path / "radixlm"),
            "HF_HUB_DISABLE_TELEMETRY": "1"}


def _tensors(path: Path) -> dict[str, bytes]:
    return {t.name: bytes(np.asarray(t.data).tobytes()) for t in gguf.GGUFReader(str(path)).tensors}


def _metadata(path: Path) -> dict[str, object]:
    fields = gguf.GGUFReader(str(path)).fields
    return {k: [bytes(np.asarray(p).tobytes()) for p in f.parts] for k, f in fields.items()
            if not k.startswith(("split.", "GGUF."))}


@pytest.mark.unit
def test_hub_spec_forms():
    assert parse_hub_spec("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M").quant == "Q4_K_M"
    spec = parse_hub_spec("org/name-GGUF/sub/Model-Q8_0.gguf@v1")
    assert (spec.repo, spec.file, spec.revision) == ("org/name-GGUF", "sub/Model-Q8_0.gguf", "v1")
    assert parse_hub_spec("org/name").quant is None and parse_hub_spec("a/b/c") is None


@pytest.mark.unit
def test_picking_a_file_by_quantization():
    files = ["m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-IQ4_XS.gguf", "Q8_0/m-Q8_0-00002-of-00002.gguf",
             "Q8_0/m-Q8_0-00001-of-00002.gguf", "mmproj-m-f16.gguf", "m-f16.gguf"]

    def pick(quant: str) -> list[str]:
        return _pick(parse_hub_spec(f"o/r:{quant}"), files, "x")

    assert pick("q4_k_m") == ["m-Q4_K_M.gguf"]  # case-insensitive, a whole word: not Q4_K_S
    assert pick("Q8_0") == ["Q8_0/m-Q8_0-00001-of-00002.gguf", "Q8_0/m-Q8_0-00002-of-00002.gguf"]
    assert pick("F16") == ["m-f16.gguf"]  # the projector is not a model
    with pytest.raises(Exception, match=r"no GGUF file of quantization Q2_K in o/r \(its GGUF files: "):
        pick("Q2_K")
    assert list(_models(files)) == ["m-Q4_K_M.gguf", "m-Q4_K_S.gguf", "m-IQ4_XS.gguf", "Q8_0/m-Q8_0.gguf",
                                    "m-f16.gguf"]


def test_split_parts_merge_into_the_unsplit_file(gguf_repo, tmp_path):
    parts = sorted(gguf_repo.glob("F32/tiny-F32-*-of-*.gguf"))
    assert len(parts) >= 2
    merged = merge_split_gguf(parts, tmp_path / "merged.gguf")
    whole = next(Path(p) for p in gguf_repo.parent.glob("whole*/tiny-F32.gguf"))
    assert _tensors(merged) == _tensors(whole)
    assert _metadata(merged) == _metadata(whole)
    with pytest.raises(SplitGGUFError, match="split.count"):
        merge_split_gguf(parts[:1], tmp_path / "short.gguf")
    with pytest.raises(SplitGGUFError, match="not a GGUF file"):
        merge_split_gguf([gguf_repo / "README.md"], tmp_path / "bad.gguf")


def test_pull_picks_downloads_merges_and_reuses_offline(gguf_repo, hub_env):
    with FakeHub({REPO: gguf_repo}) as hub:
        env = {**hub_env, "HF_ENDPOINT": hub.url}
        q8 = _radixlm("pull", f"{REPO}:q8_0", env=env)
        assert q8.returncode == 0, q8.stderr
        assert Path(q8.stdout.strip()).name == "tiny-Q8_0.gguf"
        fetched = [r for r in hub.requests if r.startswith("GET") and "/resolve/" in r]
        assert [r.rsplit("/", 1)[-1] for r in fetched] == ["tiny-Q8_0.gguf"]  # that file only
        split = _radixlm("pull", f"{REPO}:F32", env=env)
        assert split.returncode == 0, split.stderr
        merged = Path(split.stdout.strip())
        assert merged.name == "tiny-F32.gguf" and str(merged).startswith(hub_env["RADIXLM_CACHE"])
        by_file = _radixlm("pull", f"{REPO}/tiny-Q8_0.gguf", env=env)
        assert by_file.returncode == 0 and by_file.stdout == q8.stdout, by_file.stderr
        several = _radixlm("pull", f"{REPO}:Q4_0", env=env)
        assert several.returncode == 2 and "Traceback" not in several.stderr
        assert "2 GGUF files match Q4_0" in several.stderr and "extra/tiny-Q4_0.gguf" in several.stderr
        bare = _radixlm("pull", REPO, env=env)  # no quantization: say how to pick one
        assert bare.returncode == 2 and f"pass {REPO}:QUANT" in bare.stderr and "tiny-Q8_0.gguf" in bare.stderr
        missing = _radixlm("pull", f"{REPO}:Q2_K", env=env)
        assert missing.returncode == 2 and "no GGUF file of quantization Q2_K" in missing.stderr
        assert "mmproj" not in missing.stderr
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    for gone in (offline, env):  # the hub is down: the cached file, with HF_HUB_OFFLINE and without it
        again = _radixlm("pull", f"{REPO}:Q8_0", env=gone)
        assert again.returncode == 0 and again.stdout == q8.stdout, again.stderr
    listed = _radixlm("list", env=offline)
    assert listed.returncode == 0, listed.stderr
    assert f"{REPO}/tiny-Q8_0.gguf" in listed.stdout and f"{REPO}/F32/tiny-F32-00001-of-" in listed.stdout
    served = _radixlm("generate", "Hello", "--model-path", f"{REPO}:F32", "--max-new-tokens", "3", env=offline)
    assert served.returncode == 0, served.stderr
