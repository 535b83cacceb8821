"""Where llama.cpp's test fixtures (GGUF vocabularies, chat templates) live once fetched.

The files come from PyPI's ``llama-cpp-python`` sdist; ``tests/llamacpp_assets.py`` downloads and
extracts them under ``$RADIXLM_CACHE/llamacpp-<version>/`` (``vocab/`` and ``templates/``). Serving
code never downloads anything, so this module only locates them and raises ``FixturesMissing``,
naming the prefetch command, when they are not there.

Real tokenizers: a llama.cpp ``ggml-vocab-*.gguf`` converted to ``tokenizer.json`` by transformers.

transformers' GGUF loader (``AutoTokenizer.from_pretrained(dir, gguf_file=...)``) rebuilds the HF
tokenizer from the vocabulary, merges and token types in the GGUF file; ``save_pretrained`` writes
``tokenizer.json`` and ``tokenizer_config.json``. The conversion takes 5-40 s, so its output is
cached under ``$RADIXLM_CACHE/gguf-tokenizers-v<format>-<llama.cpp version>-<transformers version>/<name>``.

Two repairs are applied. The converter appends added tokens that the GGUF file does not have (for
``llama-bpe`` an ``<|endoftext|>`` at id 128256; for DeepSeek a second BOS/EOS past the vocabulary),
which would make the tokenizer larger than the real model's embedding: ids at or past the GGUF token
count are dropped. Then ``tokenizer_config.json``'s BOS/EOS/PAD/UNK name the tokens at the GGUF's
``tokenizer.ggml.*_token_id`` ids, as llama.cpp uses them.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

from radixlm.runtime.checkpoints.build_cache import building_dir, radixlm_cache

LLAMACPP_VERSION = "0.3.36"
FETCH_COMMAND = "python tests/llamacpp_assets.py"


class FixturesMissing(FileNotFoundError):
    """A llama.cpp fixture is not in the cache (it has to be pre-fetched with network access)."""


def fixtures_root() -> Path:
    """``$RADIXLM_CACHE/llamacpp-<version>`` (it may not exist)."""
    return radixlm_cache() / f"llamacpp-{LLAMACPP_VERSION}"


def _require(path: Path, what: str) -> Path:
    if not path.is_file():
        raise FixturesMissing(
            f"{what} not found at {path}: the llama.cpp fixtures (llama-cpp-python=={LLAMACPP_VERSION} "
            f"sdist) have to be fetched once with network access: run `{FETCH_COMMAND}`")
    return path


def vocab_gguf(name: str) -> Path:
    """``ggml-vocab-<name>.gguf`` (e.g. ``qwen2``, ``llama-bpe``)."""
    return _require(fixtures_root() / "vocab" / f"ggml-vocab-{name}.gguf", f"vocabulary {name!r}")


def chat_template(name: str) -> str:
    """The text of ``templates/<name>.jinja`` (e.g. ``Qwen-Qwen3-0.6B``)."""
    path = _require(fixtures_root() / "templates" / f"{name}.jinja", f"chat template {name!r}")
    return path.read_text(encoding="utf-8")


# Bump when the conversion or its repairs change, so no stale cached conversion is reused.
FORMAT_VERSION = 2

_SPECIAL_ID_FIELDS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id",
                      "pad_token": "padding_token_id", "unk_token": "unknown_token_id"}


def _gguf_tokens(gguf_path: Path) -> tuple[int, dict[str, int]]:
    """(number of tokens, ``bos_token`` / ... -> id) from the GGUF's tokenizer metadata."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf_path)).fields
    ids = {name: int(fields[f"tokenizer.ggml.{key}"].parts[-1][0])
           for name, key in _SPECIAL_ID_FIELDS.items() if f"tokenizer.ggml.{key}" in fields}
    return len(fields["tokenizer.ggml.tokens"].data), ids


def _repair(out: Path, limit: int, special_ids: dict[str, int]) -> None:
    """Drop added tokens with id >= ``limit``; name the GGUF's special tokens (see the module docstring)."""
    tok_file = out / "tokenizer.json"
    spec = json.loads(tok_file.read_text(encoding="utf-8"))
    spec["added_tokens"] = [t for t in spec.get("added_tokens", []) if t["id"] < limit]
    tok_file.write_text(json.dumps(spec, ensure_ascii=False, indent=2), encoding="utf-8")
    cfg_file = out / "tokenizer_config.json"
    config = json.loads(cfg_file.read_text(encoding="utf-8"))
    decoder = config.get("added_tokens_decoder", {})
    config["added_tokens_decoder"] = {k: v for k, v in decoder.items() if int(k) < limit}
    id_to_token = {v: k for k, v in spec["model"]["vocab"].items()}
    id_to_token.update({t["id"]: t["content"] for t in spec["added_tokens"]})
    for name, token_id in special_ids.items():
        if token_id in id_to_token:
            config[name] = id_to_token[token_id]
    cfg_file.write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")


def convert_gguf_tokenizer(name: str, out: str | Path) -> Path:
    """Convert ``ggml-vocab-<name>.gguf`` into ``out`` (``tokenizer.json``, ``tokenizer_config.json``)."""
    from transformers import AutoTokenizer

    gguf_path = vocab_gguf(name)
    out = Path(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the loader warns about every unused GGUF field
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        tok.save_pretrained(str(out))
    # The GGUF's own chat template (if any) is not the model's: real-shape checkpoints bring theirs.
    (out / "chat_template.jinja").unlink(missing_ok=True)
    _repair(out, *_gguf_tokens(gguf_path))
    return out


def gguf_tokenizer_dir(name: str) -> Path:
    """The cached conversion of ``ggml-vocab-<name>.gguf``, converting it first when needed.

    Built in a temporary sibling that is renamed into place, so readers never see a half-written
    directory and a lost race just drops its copy.
    """
    import transformers

    root = radixlm_cache() / f"gguf-tokenizers-v{FORMAT_VERSION}-{LLAMACPP_VERSION}-{transformers.__version__}"
    final = root / name
    if (final / "tokenizer.json").is_file():
        return final
    tmp = building_dir(final)
    try:
        convert_gguf_tokenizer(name, tmp)
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():  # a real failure, not a lost race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
