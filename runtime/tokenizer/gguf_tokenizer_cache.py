"""A GGUF file's tokenizer, converted once in a child process and cached.

transformers' GGUF converter (``gguf_vocab.read_gguf_vocab``) is the one source of the tokenizer
a GGUF file describes, but importing it costs the server ~20 MB resident for its life (transformers,
huggingface_hub, their HTTP stack) and ~1.5 s per start. ``load_gguf_vocab`` runs the conversion in
a child process (``python -m radixlm.runtime.tokenizer.gguf_tokenizer_cache FILE FOLDER KEY``) the
first time a file's tokenizer is seen, stores the result under ``$RADIXLM_CACHE/gguf-vocab/``
(``RADIXLM_CACHE`` defaults to ``~/.cache/radixlm``) as ``<key>.tokenizer.json`` (read by
``tokenizers`` itself) and ``<key>.json`` (the other fields, written last: an entry exists once it
does) and reads it from there afterwards. The key hashes the file's identity (its resolved path,
size and modification time, as Python's bytecode cache does), the transformers version and
``FORMAT_VERSION``, so a changed file or converter never reuses an entry. An entry is checked
before use (each field's type, the special ids inside the vocabulary, the tokenizer's size, and
``source_hash``: a hash of the GGUF file's first ``SOURCE_HASH_BYTES``, where its vocabulary lies,
so an entry of another model is never used); one that fails is converted again, with a warning
naming it. Where the cache folder cannot be written, the conversion goes to a temporary folder
and is not kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from importlib import metadata as package_metadata
from pathlib import Path

import tokenizers
from radixlm.runtime.tokenizer.gguf_vocab import GGUFVocab, read_gguf_vocab
from tqdm import tqdm

logger = logging.getLogger("radixlm.tokenizer")

FORMAT_VERSION = 2  # bump when read_gguf_vocab's output or this file's layout changes
CHILD_TIMEOUT_S = 600.0
PROGRESS_S = 0.5  # the progress line's refresh
_FIELDS = ("special_tokens", "bos_token_id", "pad_token_id", "eos_token_ids", "add_bos_token", "chat_template",
           "architecture", "token_count")
SOURCE_HASH_BYTES = 16 << 20
_CHUNK = 1 << 20


def source_hash(path: str | os.PathLike) -> str:
    """sha256 of the file's size and first ``SOURCE_HASH_BYTES`` (its metadata: the vocabulary)."""
    digest = hashlib.sha256(str(os.path.getsize(path)).encode())
    with open(path, "rb") as f:
        left = SOURCE_HASH_BYTES
        while left and (chunk := f.read(min(_CHUNK, left))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def cache_dir() -> Path:
    """``$RADIXLM_CACHE/gguf-vocab`` (``~/.cache/radixlm/gguf-vocab`` by default)."""
    root = os.environ.get("RADIXLM_CACHE") or Path.home() / ".cache" / "radixlm"
    return Path(root) / "gguf-vocab"


def cache_key(path: str | os.PathLike) -> str:
    """The cache entry's name for the GGUF file at ``path`` (see the module docstring)."""
    real = os.path.realpath(path)
    stat = os.stat(real)
    try:
        converter = package_metadata.version("transformers")
    except package_metadata.PackageNotFoundError:
        converter = "none"
    identity = f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}\0{converter}\0{FORMAT_VERSION}"
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def load_gguf_vocab(path: str | os.PathLike) -> GGUFVocab:
    """The tokenizer of the GGUF file at ``path``, from the cache or converted by a child process.

    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for a file that is not GGUF
    or whose tokenizer cannot be built (the child's message)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    if not sys.executable:  # an embedded interpreter has no executable to start a child with
        return read_gguf_vocab(path)
    folder = cache_dir()
    key = cache_key(path)
    if (folder / f"{key}.json").is_file():
        try:
            return _read(folder, key, source_hash(path))
        except Exception as e:  # noqa: BLE001 - a broken entry (bad JSON, fields, tokenizer) is rebuilt
            logger.warning("ignoring the unreadable cached tokenizer %s (%s); converting again", folder / key, e)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK)
    except OSError:
        writable = False
    if writable:
        return _convert(path, folder, key)
    logger.warning("cannot write the tokenizer cache %s (set RADIXLM_CACHE); this conversion is not kept", folder)
    with tempfile.TemporaryDirectory(prefix="radixlm-gguf-vocab-") as tmp:
        return _convert(path, Path(tmp), key)


def _convert(path: Path, folder: Path, key: str) -> GGUFVocab:
    """Run the conversion in a child process writing the entry ``key`` in ``folder`` (a progress
    line with the elapsed time on a terminal), then read it."""
    logger.info("converting the tokenizer of %s (once; cached in %s)", path.name, folder)
    cmd = [sys.executable, "-m", __name__, str(path), str(folder), key]
    bar = tqdm(desc=f"converting the tokenizer of {path.name} (once, then cached)", bar_format="{desc}: {elapsed}",
               leave=False, disable=None)  # None: shown on a terminal only
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    try:
        while True:
            try:
                _, stderr = child.communicate(timeout=PROGRESS_S)
                break
            except subprocess.TimeoutExpired:
                bar.refresh()
                if time.monotonic() > deadline:
                    raise ValueError(f"{path}: the tokenizer conversion took over {CHILD_TIMEOUT_S:.0f} s") from None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        bar.close()
    if child.returncode != 0:
        lines = stderr.strip().splitlines()
        raise ValueError(lines[-1] if lines else f"{path}: the tokenizer conversion failed (exit {child.returncode})")
    return _read(folder, key, source_hash(path))


def _read(folder: Path, key: str, source: str) -> GGUFVocab:
    """The entry ``key``, checked (``ValueError`` naming the entry and the field otherwise)."""
    entry = folder / f"{key}.json"
    fields = json.loads(entry.read_text(encoding="utf-8"))
    if not isinstance(fields, dict):
        raise ValueError(f"{entry}: not a JSON object")
    if fields.get("source_hash") != source:
        raise ValueError(f"{entry}: source_hash: the entry was made from another file")
    tokenizer = tokenizers.Tokenizer.from_file(str(folder / f"{key}.tokenizer.json"))
    _check_fields(entry, fields, tokenizer.get_vocab_size(with_added_tokens=True))
    return GGUFVocab(tokenizer, **{name: fields[name] for name in _FIELDS})


def _check_fields(entry: Path, fields: dict, vocab_size: int) -> None:
    def bad(name: str, problem: str) -> ValueError:
        return ValueError(f"{entry}: {name}: {problem}")

    def is_id(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < count

    count = fields.get("token_count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise bad("token_count", f"must be a positive integer, got {count!r:.40}")
    if vocab_size > count:
        raise bad("token_count", f"{count}, but the cached tokenizer has {vocab_size} tokens")
    special = fields.get("special_tokens")
    if not isinstance(special, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in special.items()):
        raise bad("special_tokens", "must map names to token texts")
    for name in ("bos_token_id", "pad_token_id"):
        if fields.get(name) is not None and not is_id(fields[name]):
            raise bad(name, f"must be null or a token id below {count}, got {fields[name]!r:.40}")
    eos = fields.get("eos_token_ids")
    if not isinstance(eos, list) or not all(is_id(i) for i in eos):
        raise bad("eos_token_ids", f"must be a list of token ids below {count}")
    if not isinstance(fields.get("add_bos_token"), bool):
        raise bad("add_bos_token", "must be true or false")
    if fields.get("chat_template") is not None and not isinstance(fields["chat_template"], str):
        raise bad("chat_template", "must be null or a string")
    if not isinstance(fields.get("architecture"), str):
        raise bad("architecture", "must be a string")


def _write(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file and a rename (a reader never sees half)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """The child: convert ``FILE``'s tokenizer and write the entry ``KEY`` in ``FOLDER``, the fields
    last. A ``ValueError`` is its last stderr line and exit status 2."""
    src, folder, key = (argv or sys.argv[1:])[:3]
    try:
        vocab = read_gguf_vocab(src)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    _write(Path(folder) / f"{key}.tokenizer.json", vocab.tokenizer.to_str())
    fields = {name: getattr(vocab, name) for name in _FIELDS}
    _write(Path(folder) / f"{key}.json", json.dumps({**fields, "source_hash": source_hash(src)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
