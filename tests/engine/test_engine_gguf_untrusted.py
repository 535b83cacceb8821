"""The engine walks a GGUF file's whole header (``GGUFFile``: every length, count and offset
against the bytes left) before the tokenizer's converter reads the file: a file whose 24-byte
header checks out but whose lengths lie is one ``ValueError`` naming the field, and no child
process ever reads it. The reader's own cases: ``tests/model/test_gguf_untrusted.py``."""

from __future__ import annotations

import struct

import pytest
from radixlm.runtime.tokenizer.tokenizer import Tokenizer

from radixlm import Engine


def test_a_lying_length_is_refused_before_the_tokenizer_reads_the_file(tmp_path, monkeypatch):
    def converted(*args, **kwargs):
        raise AssertionError("the tokenizer read a file the reader had not checked")

    monkeypatch.setattr(Tokenizer, "from_gguf", converted)
    key = b"general.architecture"
    # magic, version 3, no tensors, one key whose string value claims 2**62 bytes
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    path = tmp_path / "lying.gguf"
    path.write_bytes(header + struct.pack("<IQ", 8, 1 << 62) + b"llama" + bytes(64))
    with pytest.raises(ValueError, match="general.architecture"):
        Engine(str(path))
