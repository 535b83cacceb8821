"""A GGUF file's tokenizer converted once in a child process and cached
(``runtime/tokenizer/gguf_tokenizer_cache.py``): the same tokenizer as the in-process conversion,
no transformers in the server's process, a broken or unwritable cache handled."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from radixlm.runtime.testing.llamacpp_fixtures import vocab_gguf
from radixlm.runtime.tokenizer import gguf_tokenizer_cache as cache
from radixlm.runtime.tokenizer.gguf_vocab import read_gguf_vocab
from test_llamacpp_parity import _assets

FIELDS = ("special_tokens", "bos_token_id", "pad_token_id", "eos_token_ids", "add_bos_token", "chat_template",
          "architecture", "token_count")


@pytest.fixture(scope="module")
def spm_file():
    _assets()
    return vocab_gguf("llama-spm")


@pytest.fixture
def children(monkeypatch):
    """The conversion children started (their command lines)."""
    started, real = [], subprocess.Popen

    def popen(cmd, **kwargs):
        started.append(cmd)
        return real(cmd, **kwargs)

    monkeypatch.setattr(cache.subprocess, "Popen", popen)
    return started


def _same(a, b) -> None:
    assert a.tokenizer.to_str() == b.tokenizer.to_str()
    assert {f: getattr(a, f) for f in FIELDS} == {f: getattr(b, f) for f in FIELDS}


def test_converted_once_in_a_child_then_read_from_the_cache(spm_file, tmp_path, monkeypatch, children):
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path))
    first = cache.load_gguf_vocab(spm_file)
    assert len(children) == 1 and children[0][:3] == [sys.executable, "-m", cache.__name__]
    key = cache.cache_key(spm_file)
    entries = sorted(e.name for e in (tmp_path / "gguf-vocab").iterdir())
    assert entries == [f"{key}.json", f"{key}.tokenizer.json"]  # no temporary file left
    again = cache.load_gguf_vocab(spm_file)
    assert len(children) == 1  # from the cache
    _same(first, read_gguf_vocab(spm_file))
    _same(again, first)


def test_the_server_process_never_imports_transformers(spm_file, tmp_path):
    code = ("import sys\nfrom radixlm.runtime.tokenizer.tokenizer import Tokenizer\n"
            f"for _ in range(2):\n    tok = Tokenizer.from_gguf({str(spm_file)!r})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'), tok.encode('Hello'))")
    env = {**__import__("os").environ, "RADIXLM_CACHE": str(tmp_path)}  # cold, then warm
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("[] [")


def test_a_broken_entry_is_converted_again(spm_file, tmp_path, monkeypatch, children):
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path))
    key = cache.cache_key(spm_file)
    folder = tmp_path / "gguf-vocab"
    folder.mkdir(parents=True)
    (folder / f"{key}.json").write_text('{"token_count": 32000}')  # fields missing,
    (folder / f"{key}.tokenizer.json").write_text('{"model": "not a tokenizer"')  # a broken tokenizer
    _same(cache.load_gguf_vocab(spm_file), read_gguf_vocab(spm_file))
    assert len(children) == 1 and json.loads((folder / f"{key}.json").read_text())["token_count"] == 32000
    _same(cache.load_gguf_vocab(spm_file), read_gguf_vocab(spm_file))
    assert len(children) == 1


def test_an_unwritable_cache_converts_without_keeping(spm_file, tmp_path, monkeypatch, children):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RADIXLM_CACHE", str(blocker))  # its gguf-vocab folder cannot be made
    _same(cache.load_gguf_vocab(spm_file), read_gguf_vocab(spm_file))
    cache.load_gguf_vocab(spm_file)
    assert len(children) == 2


def test_a_file_without_a_tokenizer_is_a_value_error(tmp_path, monkeypatch):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "no-vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="no tokenizer"):
        cache.load_gguf_vocab(path)
    with pytest.raises(FileNotFoundError):
        cache.load_gguf_vocab(tmp_path / "missing.gguf")


def test_a_changed_file_gets_a_new_entry(spm_file, tmp_path):
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(spm_file.read_bytes())
    key = cache.cache_key(copy)
    assert key == cache.cache_key(copy) != cache.cache_key(spm_file)
    __import__("os").utime(copy, ns=(0, 12345))
    assert cache.cache_key(copy) != key


def test_without_an_interpreter_to_start_it_converts_here(spm_file, tmp_path, monkeypatch, children):
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path))
    monkeypatch.setattr(cache.sys, "executable", "")
    _same(cache.load_gguf_vocab(spm_file), read_gguf_vocab(spm_file))
    assert children == []


@pytest.mark.parametrize("field,value", [("eos_token_ids", "2"), ("token_count", 3)])
def test_an_entry_with_wrong_fields_is_named_and_converted_again(spm_file, tmp_path, monkeypatch, children,
                                                                  caplog, field, value):
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path))
    cache.load_gguf_vocab(spm_file)
    entry = tmp_path / "gguf-vocab" / f"{cache.cache_key(spm_file)}.json"
    fields = json.loads(entry.read_text())
    entry.write_text(json.dumps({**fields, field: value}))  # valid JSON, a wrong value
    with caplog.at_level("WARNING", logger="radixlm.tokenizer"):
        _same(cache.load_gguf_vocab(spm_file), read_gguf_vocab(spm_file))
    assert len(children) == 2 and f"{entry}: {field}:" in caplog.text, caplog.text
    assert json.loads(entry.read_text()) == fields  # rewritten whole


def test_an_entry_of_another_model_is_not_used(spm_file, tmp_path, monkeypatch, children, caplog):
    other = vocab_gguf("llama-bpe")  # before RADIXLM_CACHE moves the fixtures' root
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path))
    cache.load_gguf_vocab(other)
    folder = tmp_path / "gguf-vocab"
    theirs, ours = cache.cache_key(other), cache.cache_key(spm_file)
    for suffix in (".json", ".tokenizer.json"):  # another model's entry under this file's key
        (folder / f"{ours}{suffix}").write_bytes((folder / f"{theirs}{suffix}").read_bytes())
    with caplog.at_level("WARNING", logger="radixlm.tokenizer"):
        _same(cache.load_gguf_vocab(spm_file), read_gguf_vocab(spm_file))
    assert len(children) == 2 and "source_hash: the entry was made from another file" in caplog.text
