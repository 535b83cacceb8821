"""The distribution installs as a real (non-editable) wheel: every root folder becomes
``radixlm.<folder>``, package data travels with it, and the console script entry point resolves."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ["radixlm", "radixlm.radix_cache", "radixlm.constrained", "radixlm.constrained.testing",
            "radixlm.constrained.json_schema", "radixlm.constrained.pattern", "radixlm.lang",
            "radixlm.constrained.compile", "radixlm.constrained.ir", "radixlm.constrained.checks",
            "radixlm.constrained.masks", "radixlm.constrained.decoding",
            "radixlm.runtime", "radixlm.runtime.server", "radixlm.runtime.engine", "radixlm.runtime.scheduler",
            "radixlm.runtime.model", "radixlm.runtime.model.parallel", "radixlm.runtime.router",
            "radixlm.runtime.chat_formats", "radixlm.runtime.tokenizer", "radixlm.runtime.checkpoints",
            "radixlm.kernels", "radixlm.kernels.testing", "radixlm.runtime.server.dashboard"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build_dir = tmp_path_factory.mktemp("build")
    # no build isolation: setuptools is already here and the network may not be
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(REPO)], check=True, capture_output=True, timeout=300,
                   env=dict(os.environ, TMPDIR=str(build_dir)))
    wheels = list(out.glob("radixlm-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_maps_root_folders_and_ships_data(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    for pkg in PACKAGES:
        assert pkg.replace(".", "/") + "/__init__.py" in names, pkg
    assert "radixlm/radix_cache/radix_cache.py" in names
    assert "radixlm/runtime/checkpoints/data/corpus.txt" in names
    assert "radixlm/runtime/checkpoints/data/chat_template.jinja" in names
    assert not any(n.startswith(("tests/", "radix_cache/", "runtime/")) for n in names)
    # the dashboard's page and every asset its routes serve (no CDN: the wheel holds them all)
    from radixlm.runtime.server.dashboard.routes import ASSETS
    for asset in ("index.html", *ASSETS):
        assert f"radixlm/runtime/server/dashboard/static/{asset}" in names, asset
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "radixlm = radixlm.__main__:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_installed_wheel_imports_and_builds_a_checkpoint(wheel: Path, tmp_path: Path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    code = (
        "import importlib, sys, radixlm\n"
        f"assert radixlm.__file__.startswith({str(site)!r}), radixlm.__file__\n"
        f"for p in {PACKAGES!r}: importlib.import_module(p)\n"
        "from radixlm.radix_cache import RadixCache\n"
        "from radixlm.runtime.checkpoints.synthetic import make_checkpoint\n"
        "from radixlm.runtime.tokenizer.tokenizer import Tokenizer\n"
        f"path = make_checkpoint({str(tmp_path / 'ckpt')!r}, arch='llama', size='tiny')\n"
        "print(Tokenizer(path).decode(Tokenizer(path).encode('hello wheel')))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(site), RADIXLM_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "hello wheel"


def test_every_package_folder_is_listed_in_pyproject():
    """A new sub-package left out of ``[tool.setuptools] packages`` would be missing from the wheel."""
    import re

    text = (REPO / "pyproject.toml").read_text()
    listed = set(re.findall(r'"(radixlm[\w.]*)"', text.split("packages = [", 1)[1].split("]", 1)[0]))
    found = set()
    for folder in ("radixlm", "radix_cache", "constrained", "lang", "runtime", "kernels"):
        for init in (REPO / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((["radixlm"] if folder == "radixlm" else ["radixlm", folder]) + list(parts)))
    # data folders (no __init__.py) are listed too, each with its package data
    data = set(re.findall(r'^"(radixlm[\w.]*)" = \[', text.split("[tool.setuptools.package-data]", 1)[1], re.M))
    assert found | data == listed, f"missing from pyproject: {sorted(found - listed)}; stale: {sorted(listed - found - data)}"
