"""Where ``--model-path`` points: a local folder or file, or a Hugging Face hub id.

A path that exists is used as it is (a checkpoint folder, or a GGUF file). Otherwise a spec of the
form ``ORG/NAME`` or ``ORG/NAME@REVISION`` is a hub id: ``huggingface_hub.snapshot_download``
fetches only the files serving needs (config, tokenizer files, chat template, safetensors weights)
into the standard Hugging Face cache (``HF_HOME``/``HF_HUB_CACHE``), with its progress bars, and
returns the snapshot folder. With ``HF_HUB_OFFLINE=1``, or when the hub cannot be reached, a
snapshot already in the cache is used. Every failure is a ``ModelSourceError`` whose message is one
line saying what to do.

GGUF repositories hold one file per quantization; two forms pick one, as llama-server's ``-hf``
does: ``ORG/NAME:QUANT`` (the file whose name carries ``QUANT`` as a word, case-insensitive, e.g.
``Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M``) and ``ORG/NAME/FILE.gguf`` (that file). Either may
end in ``@REVISION``. The file is downloaded with ``hf_hub_download`` (a progress bar) into the
same cache; a model split into ``-00001-of-0000N`` parts is downloaded whole and merged once into
``$RADIXLM_CACHE/hub-gguf/`` (``gguf_split``). Offline, the choice is made among the cached files.

Split GGUF files (``NAME-00001-of-00003.gguf``, as ``llama-gguf-split`` writes them) merged into one.

Each part is a whole GGUF file: its own header, metadata and tensor table, then its tensors' data.
The first part holds the model's metadata; every part holds ``split.no``/``split.count``/
``split.tensors.count``. :func:`merge_split_gguf` writes one file as ``llama-gguf-split --merge``
does: the first part's metadata less the ``split.*`` keys, every part's tensor table in order with
offsets moved past the parts before it, then each part's data section, aligned. Only headers are
parsed (no vocabulary decoded); data are copied in blocks, with a progress bar on a terminal.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from radixlm.runtime.checkpoints.build_cache import radixlm_cache
from tqdm.auto import tqdm

# What a served checkpoint needs; other files in a hub repository (other weight formats, README,
# images, ONNX exports) are not downloaded.
HUB_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
             "special_tokens_map.json", "chat_template.jinja", "chat_template.json", "*.safetensors",
             "model.safetensors.index.json")
_NAME = r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*"
_REVISION = r"(?:@(?P<revision>[\w./-]+))?"
_HUB_ID = re.compile(rf"(?P<repo>{_NAME}){_REVISION}")
_GGUF_QUANT = re.compile(rf"(?P<repo>{_NAME}):(?P<quant>[\w.-]+){_REVISION}")
_GGUF_FILE = re.compile(rf"(?P<repo>{_NAME})/(?P<file>[\w./-]+\.gguf){_REVISION}", re.IGNORECASE)
_NOT_A_MODEL = ("mmproj",)  # vision projectors beside the language model in GGUF repositories


class ModelSourceError(Exception):
    """A ``--model-path`` that cannot be served; its message is the whole report (one line)."""


@dataclass(frozen=True)
class HubSpec:
    """A hub spec parsed: the repository, the revision, and for a GGUF model the quantization or file."""

    repo: str
    revision: str | None = None
    quant: str | None = None
    file: str | None = None


def parse_hub_spec(spec: str) -> HubSpec | None:
    """``spec`` as a hub reference (``ORG/NAME[@REV]``, ``ORG/NAME:QUANT[@REV]``,
    ``ORG/NAME/FILE.gguf[@REV]``), or None when it is a local path or none of these forms."""
    if os.path.exists(os.path.expanduser(spec)) or spec.startswith((".", "/", "~")):
        return None
    for pattern in (_HUB_ID, _GGUF_QUANT, _GGUF_FILE):
        if m := pattern.fullmatch(spec):
            found = m.groupdict()
            return HubSpec(found["repo"], found["revision"], found.get("quant"), found.get("file"))
    return None


def is_hub_id(spec: str) -> bool:
    """True when ``spec`` is no local path but reads as one of the hub forms of :func:`parse_hub_spec`."""
    return parse_hub_spec(spec) is not None


def resolve_model_path(spec: str, flag: str = "--model-path") -> str:
    """The local path to serve for ``spec``: the path itself, the hub snapshot, or the GGUF file it names.

    Raises ``ModelSourceError`` for a path that does not exist and is no hub id, and for every hub
    failure (unknown, private or gated repository, unknown revision or file, no GGUF file of that
    quantization or several, no network and no cached copy).
    """
    local = os.path.expanduser(spec)
    if os.path.exists(local):
        return local
    hub = parse_hub_spec(spec)
    if hub is None:
        raise ModelSourceError(
            f"{flag} {spec}: no such file or directory (pass a checkpoint folder, a .gguf file, a "
            "Hugging Face hub id such as Qwen/Qwen2.5-0.5B-Instruct, or a GGUF repository and its "
            "quantization such as Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q4_K_M)")
    what = f"{flag} {spec}"
    with _hub_errors(what, hub):
        if hub.quant is None and hub.file is None:
            from huggingface_hub import snapshot_download

            folder = snapshot_download(hub.repo, revision=hub.revision, allow_patterns=list(HUB_FILES))
            if not (Path(folder) / "config.json").is_file() and (models := _models(_gguf_files(hub))):
                raise ModelSourceError(f"{what}: a GGUF repository (no config.json): pass {hub.repo}:QUANT or "
                                       f"{hub.repo}/FILE.gguf ({_listing(models)})")
            return folder
        return str(_gguf(hub, what))


def _gguf(hub: HubSpec, what: str) -> Path:
    """The GGUF file ``hub`` names, downloaded (its parts merged when it is split)."""
    from huggingface_hub import hf_hub_download

    files = _gguf_files(hub)
    names = _pick(hub, files, what)
    paths = [Path(hf_hub_download(hub.repo, name, revision=hub.revision)) for name in names]
    if len(paths) == 1:
        return paths[0]
    first = Path(names[0])
    snapshot = paths[0].parents[len(first.parts) - 1]  # the snapshot's folder, named after its commit
    base = split_parts(names[0])[0].rsplit("/", 1)[-1]
    out = radixlm_cache() / "hub-gguf" / hub.repo.replace("/", "--") / snapshot.name / first.parent / f"{base}.gguf"
    return out if out.is_file() else merge_split_gguf(paths, out)


def _gguf_files(hub: HubSpec) -> list[str]:
    """The repository's ``.gguf`` files: the hub's listing, or when it cannot be reached the cache's."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError

    if not constants.HF_HUB_OFFLINE:
        try:
            infos = snapshot_download(hub.repo, revision=hub.revision, allow_patterns=["*.gguf"], dry_run=True,
                                      tqdm_class=_Quiet)
            return sorted(info.filename for info in infos)
        except (HfHubHTTPError, HFValidationError):  # the hub answered: no such repository, revision...
            raise
        except Exception:  # noqa: BLE001 - the hub cannot be reached (httpx, OSError): the cache answers
            pass
    return _cached_gguf_files(hub)


def _cached_gguf_files(hub: HubSpec) -> list[str]:
    """The ``.gguf`` files of ``hub``'s revision in the cache; ``LocalEntryNotFoundError`` if none."""
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    storage = Path(constants.HF_HUB_CACHE) / f"models--{hub.repo.replace('/', '--')}"
    ref = storage / "refs" / (hub.revision or "main")
    folder = storage / "snapshots" / (ref.read_text().strip() if ref.is_file() else hub.revision or "main")
    found = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.suffix.lower() == ".gguf")
    if not found:
        raise LocalEntryNotFoundError(f"no GGUF file of {hub.repo} in the cache")
    return found


class _Quiet(tqdm):
    """No progress bar for the listing (the download shows one)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **{**kwargs, "disable": True})


def _pick(hub: HubSpec, files: list[str], what: str) -> list[str]:
    """The file names (one, or every part of a split model) that ``hub``'s quantization or file names."""
    models = _models(files)
    if hub.file is not None:
        wanted = hub.file.lower()
        for parts in models.values():
            if wanted in (p.lower() for p in parts):
                return parts
        raise ModelSourceError(f"{what}: no file {hub.file} in {hub.repo} ({_listing(models)})")
    word = re.compile(rf"(^|[-_./]){re.escape(hub.quant.lower())}([-_./]|$)")
    found = [key for key in models if word.search(key.lower()[:-len(".gguf")])]
    if len(found) == 1:
        return models[found[0]]
    if not found:
        raise ModelSourceError(f"{what}: no GGUF file of quantization {hub.quant} in {hub.repo} "
                               f"({_listing(models)})")
    raise ModelSourceError(f"{what}: {len(found)} GGUF files match {hub.quant} in {hub.repo}: "
                           f"{', '.join(found)}; pass one as {hub.repo}/FILE.gguf")


def _models(files: list[str]) -> dict[str, list[str]]:
    """GGUF models by name (a split model's name without its part number) -> its files, in order."""
    models: dict[str, list[str]] = {}
    for name in files:
        if name.rsplit("/", 1)[-1].lower().startswith(_NOT_A_MODEL):
            continue
        split = split_parts(name)
        if split is None:
            models[name] = [name]
        else:
            folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
            models.setdefault(f"{folder}{split[0]}.gguf", part_names(name))
    return models


def _listing(models: dict[str, list[str]]) -> str:
    if not models:
        return "it holds no GGUF files"
    return "its GGUF files: " + ", ".join(models)


@contextmanager
def _hub_errors(what: str, hub: HubSpec) -> Iterator[None]:
    """``huggingface_hub``'s failures as one-line ``ModelSourceError``s."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        EntryNotFoundError,  # LocalEntryNotFoundError's base: caught after it
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        yield
    except GatedRepoError:
        raise ModelSourceError(f"{what}: the repository is gated: accept its terms on the hub's page and "
                               "set HF_TOKEN to a token of that account") from None
    except RepositoryNotFoundError:
        raise ModelSourceError(f"{what}: no such repository on {constants.ENDPOINT} (check the name; for "
                               "a private repository set HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise ModelSourceError(f"{what}: no revision {hub.revision!r} in {hub.repo} (a branch, tag or "
                               "commit)") from None
    except LocalEntryNotFoundError:
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else f"{constants.ENDPOINT} cannot be reached"
        raise ModelSourceError(f"{what}: not in the Hugging Face cache and {why}: download it once with "
                               "network access, or pass a local folder") from None
    except EntryNotFoundError:
        raise ModelSourceError(f"{what}: the file is not in the repository") from None
    except HFValidationError as e:
        raise ModelSourceError(f"{what}: not a valid hub id: {_first_line(e)}") from None
    except HfHubHTTPError as e:
        raise ModelSourceError(f"{what}: the hub answered {_first_line(e)}") from None
    except OSError as e:
        raise ModelSourceError(f"{what}: download failed: {_first_line(e)}") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def cached_models() -> list[tuple[str, int]]:
    """What the Hugging Face cache holds, as ``(spec, bytes)``: ``ORG/NAME`` for a safetensors
    checkpoint, ``ORG/NAME/FILE.gguf`` for each GGUF model (a split one by its first part)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        cache = scan_cache_dir()
    except CacheNotFound:
        return []
    rows = []
    for repo in sorted(cache.repos, key=lambda r: r.repo_id.lower()):
        if repo.repo_type != "model":
            continue
        files = {f.file_path.relative_to(rev.snapshot_path).as_posix(): f.size_on_disk
                 for rev in repo.revisions for f in rev.files}
        ggufs = _models([name for name in files if name.lower().endswith(".gguf")])
        for parts in ggufs.values():
            if all(p in files for p in parts):
                rows.append((f"{repo.repo_id}/{parts[0]}", sum(files[p] for p in parts)))
        if any(name.endswith(".safetensors") for name in files) or not ggufs:
            rows.append((repo.repo_id, sum(size for name, size in files.items() if not name.endswith(".gguf"))))
    return rows


def model_name(path: str) -> str:
    """The name a served model goes by: ``ORG/NAME`` for a hub snapshot or a file in one, else the
    path's last part."""
    parts = os.path.normpath(os.path.abspath(path)).split(os.sep)
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots" and parts[i - 1].startswith("models--"):
            return parts[i - 1][len("models--"):].replace("--", "/")
    return os.path.basename(path.rstrip("/")) or "default"


logger = logging.getLogger("radixlm.loading")
SPLIT_NAME = re.compile(r"^(?P<base>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type -> bytes
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_COPY_BLOCK = 1 << 22


class SplitGGUFError(ValueError):
    """The parts do not form one split GGUF model (missing parts, not GGUF, mismatched layout)."""


@dataclass(frozen=True)
class _Part:
    """One part's header read off the file: raw metadata entries and tensor entries, where data start."""

    path: Path
    version: int
    kvs: list[tuple[str, bytes]]  # key -> the entry's raw bytes (key, type, value)
    tensors: list[tuple[bytes, int]]  # the entry's bytes up to its offset field, the offset
    alignment: int
    data_start: int
    size: int


def split_parts(name: str) -> tuple[str, int, int] | None:
    """``(base, number, count)`` when ``name`` (a file name or path) is a part of a split GGUF, else None."""
    m = SPLIT_NAME.match(name.rsplit("/", 1)[-1])
    return (m["base"], int(m["no"]), int(m["count"])) if m else None


def part_names(first: str) -> list[str]:
    """The names of every part of the split GGUF whose part (any of them) is ``first``, in order."""
    found = split_parts(first)
    if found is None:
        raise SplitGGUFError(f"{first}: not a part of a split GGUF file (NAME-00001-of-0000N.gguf)")
    folder = first.rsplit("/", 1)[0] + "/" if "/" in first else ""
    base, _, count = found
    return [f"{folder}{base}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


class _Reader:
    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SplitGGUFError(f"{self.path.name}: the header runs past the end of the file")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def string(self) -> bytes:
        return self.take(self.u64())

    def skip_value(self, kind: int, depth: int = 0) -> None:
        if kind in _FIXED:
            self.take(_FIXED[kind])
        elif kind == _STRING:
            self.string()
        elif kind == _ARRAY and depth < 8:
            inner, count = self.u32(), self.u64()
            if inner in _FIXED:
                self.take(_FIXED[inner] * count)
            else:
                for _ in range(count):
                    self.skip_value(inner, depth + 1)
        else:
            raise SplitGGUFError(f"{self.path.name}: unknown metadata value type {kind}")


def _read_part(path: Path) -> _Part:
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(min(size, 64 << 20))  # headers hold metadata and the tensor table only
    r = _Reader(head, path)
    if r.take(4) != _MAGIC:
        raise SplitGGUFError(f"{path.name}: not a GGUF file (no GGUF magic)")
    version = r.u32()
    if version not in (2, 3):
        raise SplitGGUFError(f"{path.name}: GGUF version {version} (2 and 3 are read)")
    n_tensors, n_kv = r.u64(), r.u64()
    kvs, alignment = [], _DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        start = r.pos
        key = r.string().decode("utf-8", "replace")
        kind = r.u32()
        if key == "general.alignment" and kind == _UINT32:
            alignment = struct.unpack("<I", head[r.pos:r.pos + 4])[0]
        r.skip_value(kind)
        kvs.append((key, head[start:r.pos]))
    tensors = []
    for _ in range(n_tensors):
        start = r.pos
        r.string()
        r.take(8 * r.u32())
        r.u32()
        entry = head[start:r.pos]
        tensors.append((entry, r.u64()))
    data_start = -(-r.pos // alignment) * alignment
    return _Part(path, version, kvs, tensors, alignment, data_start, size)


def merge_split_gguf(parts: list[Path], out: Path) -> Path:
    """Write the split GGUF ``parts`` (in order) as the one file ``out`` (atomically) and return it.

    Raises ``SplitGGUFError`` when a part is not GGUF, the parts disagree on the alignment, or
    their ``split.count`` differs from the number of parts."""
    read = [_read_part(p) for p in parts]
    first = read[0]
    count = _split_count(first)
    if count is not None and count != len(parts):
        raise SplitGGUFError(f"{first.path.name}: split.count is {count}, {len(parts)} parts were given")
    if any(p.alignment != first.alignment for p in read):
        raise SplitGGUFError(f"{first.path.name}: the parts disagree on general.alignment")
    align = first.alignment
    kvs = [raw for key, raw in first.kvs if not key.startswith("split.")]
    header = [_MAGIC, struct.pack("<IQQ", 3, sum(len(p.tensors) for p in read), len(kvs)), *kvs]
    base = 0
    for p in read:
        header += [entry + struct.pack("<Q", base + offset) for entry, offset in p.tensors]
        base += -(-(p.size - p.data_start) // align) * align
    head = b"".join(header)
    head += b"\0" * (-len(head) % align)
    tmp = out.with_name(out.name + f".{os.getpid()}.part")
    out.parent.mkdir(parents=True, exist_ok=True)
    desc = f"merging the {len(parts)} parts of {out.name} (once)"
    logger.info("%s: %.1f MB", desc, base / 1e6)
    with tmp.open("wb") as dst, tqdm(total=base, unit="B", unit_scale=True, desc=desc, leave=False,
                                     disable=None) as bar:  # None: drawn on a terminal only
        dst.write(head)
        for p in read:
            with p.path.open("rb") as src:
                src.seek(p.data_start)
                while block := src.read(_COPY_BLOCK):
                    dst.write(block)
                    bar.update(len(block))
            dst.write(b"\0" * (-(p.size - p.data_start) % align))
    tmp.replace(out)
    return out


def _split_count(part: _Part) -> int | None:
    for key, raw in part.kvs:
        if key == "split.count":
            kind = struct.unpack_from("<I", raw, 8 + len(key))[0]
            fmt = {2: "<H", 4: "<I", 10: "<Q", 3: "<h", 5: "<i"}.get(kind)
            return struct.unpack_from(fmt, raw, 12 + len(key))[0] if fmt else None
    return None
