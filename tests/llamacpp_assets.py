"""llama.cpp's test assets (chat templates, tokenizer vocabularies), fetched once and cached on disk.

The assets come from PyPI's ``llama-cpp-python`` sdist, which vendors llama.cpp's ``models/`` folder:
``models/templates/*.jinja`` (real models' chat templates) and ``models/ggml-vocab-*.gguf`` with their
``.gguf.inp`` / ``.gguf.out`` tokenization cases. The sdist is pinned so the corpus (and the figures
the tests record over it) never move under us. Only those files are kept, under
``$RADIXLM_CACHE/llamacpp-<version>/`` (default ``~/.cache/radixlm``); the 77 MB archive is deleted.

Pre-fetch (e.g. before going offline)::

    python tests/llamacpp_assets.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from radixlm.runtime.testing.llamacpp_fixtures import LLAMACPP_VERSION

VERSION = LLAMACPP_VERSION  # one pin, shared with the checkpoints that need these files
FETCH_COMMAND = "python tests/llamacpp_assets.py"
_MODELS_DIR = "vendor/llama.cpp/models/"
_VOCAB_SUFFIXES = (".gguf", ".gguf.inp", ".gguf.out")
_PIP_TIMEOUT_S = 600


class AssetsUnavailable(RuntimeError):
    """The sdist could not be downloaded or read (offline, or PyPI unreachable)."""


@dataclass(frozen=True)
class LlamaCppAssets:
    """Paths of the extracted assets."""

    root: Path

    @property
    def templates_dir(self) -> Path:
        return self.root / "templates"

    @property
    def vocab_dir(self) -> Path:
        return self.root / "vocab"

    def templates(self) -> list[Path]:
        """Every ``*.jinja`` chat template, sorted by file name."""
        return sorted(self.templates_dir.glob("*.jinja"))

    def vocab_files(self) -> list[Path]:
        """Every ``ggml-vocab-*`` file (``.gguf`` and its ``.inp`` / ``.out`` cases), sorted by name."""
        return sorted(self.vocab_dir.glob("ggml-vocab-*"))


def cache_root() -> Path:
    """``$RADIXLM_CACHE/llamacpp-<version>`` (default ``~/.cache/radixlm``), the same root as our checkpoints."""
    base = os.environ.get("RADIXLM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "radixlm")
    return Path(base) / f"llamacpp-{VERSION}"


def _target_dir(name: str) -> str | None:
    """Where a member of the sdist goes (``templates`` or ``vocab``), or None to skip it."""
    _, sep, rel = name.partition("/" + _MODELS_DIR)
    if not sep:
        return None
    if rel.startswith("templates/") and rel.endswith(".jinja") and rel.count("/") == 1:
        return "templates"
    if rel.startswith("ggml-vocab-") and "/" not in rel and rel.endswith(_VOCAB_SUFFIXES):
        return "vocab"
    return None


def _extract(sdist: Path, dest: Path) -> None:
    """Copy the wanted regular files out of ``sdist`` into ``dest/templates`` and ``dest/vocab``.

    Members are written by base name only, so no archive path (``..``, absolute, links) can escape ``dest``.
    """
    for sub in ("templates", "vocab"):
        (dest / sub).mkdir(parents=True)
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive:
            sub = _target_dir(member.name)
            if sub is None or not member.isfile():
                continue
            source = archive.extractfile(member)
            with source, open(dest / sub / Path(member.name).name, "wb") as out:
                shutil.copyfileobj(source, out)
    if not any((dest / "templates").glob("*.jinja")):
        raise AssetsUnavailable(f"{sdist.name} holds no {_MODELS_DIR}templates/*.jinja")


def _download_sdist(into: Path) -> Path:
    """``pip download`` the pinned sdist into ``into``; raises ``AssetsUnavailable`` on any failure."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--disable-pip-version-check", "--retries", "1", "--timeout", "20",
           f"llama-cpp-python=={VERSION}", "-d", str(into)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AssetsUnavailable(f"pip download failed: {exc}") from exc
    found = sorted(into.glob("llama_cpp_python-*.tar.gz"))
    if done.returncode != 0 or not found:
        last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]  # pip's verdict
        raise AssetsUnavailable(f"pip download exited {done.returncode}: {last}")
    return found[0]


def fetch() -> LlamaCppAssets:
    """The cached assets, downloading and extracting them first when they are not there yet.

    The extraction goes to a temporary folder beside the cache that is renamed into place, so a crash or a
    concurrent run never leaves a half-filled cache (the loser of a race just drops its copy).
    """
    root = cache_root()
    if root.is_dir():
        return LlamaCppAssets(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{root.name}-") as tmp:
        tmp_path = Path(tmp)
        sdist = _download_sdist(tmp_path / "download")
        staged = tmp_path / "assets"
        try:
            _extract(sdist, staged)
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise AssetsUnavailable(f"cannot read {sdist.name}: {exc}") from exc
        try:
            staged.rename(root)
        except OSError:
            if not root.is_dir():  # not a lost race: a real failure
                raise
    return LlamaCppAssets(root)


@lru_cache(maxsize=1)
def fetch_or_reason() -> LlamaCppAssets | str:
    """``fetch()``, or the skip message when it fails; tried once per process (a failed download is slow)."""
    try:
        return fetch()
    except AssetsUnavailable as exc:
        return (f"llama.cpp test assets unavailable ({exc}); fetch them once with network access: "
                f"`{FETCH_COMMAND}` (or `pip download --no-deps --no-binary :all: llama-cpp-python=={VERSION}`)")


def main() -> int:
    """CLI: pre-fetch the assets and print where they are."""
    try:
        assets = fetch()
    except AssetsUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{len(assets.templates())} templates in {assets.templates_dir}")
    print(f"{len(assets.vocab_files())} vocab files in {assets.vocab_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
