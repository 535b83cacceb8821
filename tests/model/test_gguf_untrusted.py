"""A GGUF file is untrusted input: every malformed file is one ``ValueError`` naming the file, the
field and the problem, found before anything of the stated size is allocated or decoded.

The hostile files are built byte by byte (``_gguf``); the fuzz test mutates a small valid file
(``_tiny``) at random header positions with fixed seeds and asserts each mutant either loads (reader
and config) or raises that ``ValueError``, never another exception, and that rejecting it allocates
at most twice the header plus the walk's fixed overhead (``tracemalloc``).
"""

from __future__ import annotations

import random
import struct
import tracemalloc

import numpy as np
import pytest
from radixlm.runtime.gguf_path import check_gguf_header
from radixlm.runtime.model.architectures import hf_config
from radixlm.runtime.model.gguf_reader import MAX_ARRAY_DEPTH, GGUFFile

pytestmark = pytest.mark.unit

STRING, ARRAY, UINT32 = 8, 9, 4
F32 = 0
FUZZ_SEEDS = range(4)
MUTANTS_PER_SEED = 150
WALK_OVERHEAD = 64 << 10  # the walk's own Python objects (dicts, the exception), whatever the file


def _str(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, kind: int, payload: bytes) -> bytes:
    return _str(key) + struct.pack("<I", kind) + payload


def _info(name: str, dims: list[int], offset: int, qtype: int = F32) -> bytes:
    """A tensor-table entry; ``dims`` in file order (innermost first)."""
    return _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", qtype, offset)


def _gguf(path, kvs=(), infos=(), data=b"", *, kv_count=None, tensor_count=None, version=3) -> str:
    head = b"GGUF" + struct.pack("<IQQ", version, len(infos) if tensor_count is None else tensor_count,
                                 len(kvs) if kv_count is None else kv_count)
    body = head + b"".join(kvs) + b"".join(infos)
    body += b"\0" * (-len(body) % 32)
    path.write_bytes(body + data)
    return str(path)


def _tiny(path, vocab: int = 64, hidden: int = 32, ffn: int = 32) -> str:
    """A valid one-layer llama GGUF (float32 weights, a string-array vocabulary, a nested array)."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in (("context_length", 64), ("embedding_length", hidden), ("block_count", 1),
                       ("feed_forward_length", ffn)):
        w.add_uint32(f"llama.{key}", value)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_array("test.nested", [[1, 2], [3]])
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,), "output.weight": (vocab, hidden)}
    for name, shape in (("attn_norm", (hidden,)), ("ffn_norm", (hidden,)), ("attn_q", (hidden, hidden)),
                        ("attn_k", (hidden, hidden)), ("attn_v", (hidden, hidden)),
                        ("attn_output", (hidden, hidden)), ("ffn_gate", (ffn, hidden)), ("ffn_up", (ffn, hidden)),
                        ("ffn_down", (hidden, ffn))):
        shapes[f"blk.0.{name}.weight"] = shape
    for name, shape in shapes.items():
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def _read(path: str) -> dict:
    with GGUFFile(path) as reader:
        return hf_config(reader)


def _rejects(path: str, field: str, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        _read(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and field in message and problem in message, message
    assert "\n" not in message


def test_the_tiny_file_loads(tmp_path):
    config = _read(_tiny(tmp_path / "ok.gguf"))
    assert config["vocab_size"] == 64 and config["hidden_size"] == 32
    with GGUFFile(tmp_path / "ok.gguf") as reader:
        assert [a.tolist() for a in reader.metadata["test.nested"]] == [[1, 2], [3]]


def test_magic_version_and_counts_come_first(tmp_path):
    noise = tmp_path / "noise.gguf"
    noise.write_bytes(random.Random(0).randbytes(1 << 16))
    _rejects(str(noise), "magic", "not a GGUF file")
    _rejects(_gguf(tmp_path / "v9.gguf", version=9), "version", "GGUF version 9 is not supported")
    _rejects(_gguf(tmp_path / "kv.gguf", kv_count=1 << 62), "kv_count", "cannot fit")
    _rejects(_gguf(tmp_path / "tc.gguf", tensor_count=1 << 62), "tensor_count", "cannot fit")
    short = tmp_path / "short.gguf"
    short.write_bytes(b"GGUF\x03\0")
    _rejects(str(short), "header", "truncated")
    assert check_gguf_header(_tiny(tmp_path / "ok.gguf"))[0] == 3


def test_lengths_are_checked_against_the_bytes_left(tmp_path):
    long_key = struct.pack("<Q", 1 << 62) + b"general.architecture"
    _rejects(_gguf(tmp_path / "key.gguf", [long_key]), "key #0", "remain")
    long_value = _str("general.architecture") + struct.pack("<IQ", STRING, 1 << 62) + b"llama"
    _rejects(_gguf(tmp_path / "value.gguf", [long_value]), "general.architecture", "remain")
    many = _kv("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, 1 << 62))
    _rejects(_gguf(tmp_path / "count.gguf", [many]), "tokenizer.ggml.tokens", "cannot fit")
    dims = _info("w", [4] * 7, 0)
    dims = dims.replace(struct.pack("<I", 7), struct.pack("<I", 2**32 - 1), 1)
    _rejects(_gguf(tmp_path / "dims.gguf", infos=[dims]), "w", "n_dims 4294967295 is outside 1..4")
    bad_type = _kv("x", 99, b"")
    _rejects(_gguf(tmp_path / "type.gguf", [bad_type]), "x", "unknown value type 99")


def test_nested_arrays_are_walked_without_recursion(tmp_path):
    deep = struct.pack("<IQ", ARRAY, 1) * 100_000 + struct.pack("<IQ", UINT32, 0)
    _rejects(_gguf(tmp_path / "deep.gguf", [_kv("x", ARRAY, deep)]), "x",
             f"arrays nest deeper than {MAX_ARRAY_DEPTH} levels")
    wide = struct.pack("<IQ", ARRAY, 5_000_000) + struct.pack("<IQ", UINT32, 0) * 5_000_000
    _rejects(_gguf(tmp_path / "wide.gguf", [_kv("x", ARRAY, wide)]), "x", "nested arrays hold more than")


def test_tensor_sizes_are_python_integers(tmp_path):
    overflow = _info("token_embd.weight", [896, 2**32, 2**32], 0)  # 896 * 2^64: 0 in int64
    _rejects(_gguf(tmp_path / "overflow.gguf", infos=[overflow], data=b"\0" * 64), "token_embd.weight",
             "run past the end of the file")


def test_tensor_ranges_are_aligned_and_disjoint(tmp_path):
    data = b"\0" * 256
    twice = [_info("a", [8], 0), _info("b", [8], 0)]
    _rejects(_gguf(tmp_path / "same.gguf", infos=twice, data=data), "b", "overlaps tensor 'a'")
    _rejects(_gguf(tmp_path / "odd.gguf", infos=[_info("a", [8], 4)], data=data), "a",
             "is not a multiple of the alignment 32")
    duplicate = [_info("a", [8], 0), _info("a", [8], 32)]
    _rejects(_gguf(tmp_path / "dup.gguf", infos=duplicate, data=data), "a", "appears twice")


def _set_u32(path, key: str, value: int) -> None:
    """Rewrite the u32 metadata value of ``key`` in place."""
    raw = bytearray(path.read_bytes())
    at = raw.index(_str(key)) + len(_str(key))
    assert struct.unpack_from("<I", raw, at)[0] == UINT32
    struct.pack_into("<I", raw, at + 4, value)
    path.write_bytes(bytes(raw))


def test_metadata_must_agree_with_the_tensors(tmp_path):
    path = tmp_path / "wide.gguf"
    _tiny(path)
    _set_u32(path, "llama.embedding_length", 2**31)
    _rejects(str(path), "llama.embedding_length", "is outside 1..")
    _tiny(path)
    _set_u32(path, "llama.embedding_length", 64)
    _rejects(str(path), "token_embd.weight", "does not match the metadata's [64, 64]")
    _tiny(path)
    _set_u32(path, "llama.block_count", 3)
    _rejects(str(path), "blk.1.attn_q.weight", "missing (the metadata states 3 layers)")
    _tiny(path)
    _set_u32(path, "llama.feed_forward_length", 48)
    _rejects(str(path), "blk.0.ffn_gate.weight", "does not match")


def test_a_vocabulary_longer_than_the_embedding_is_refused(tmp_path):
    path = tmp_path / "vocab.gguf"
    _tiny(path)
    raw = bytearray(path.read_bytes())
    # the same 64 tokens, but an embedding (and head) of 48 rows: shrink both tensors' first dims
    for name in ("token_embd.weight", "output.weight"):
        at = raw.index(_str(name)) + len(_str(name)) + 4 + 8  # past n_dims and the inner dim
        struct.pack_into("<Q", raw, at, 48)
    path.write_bytes(bytes(raw))
    _rejects(str(path), "tokenizer.ggml.tokens", "64 tokens but token_embd.weight has only 48 rows")


def _mutants(good: bytes, header: int, seed: int):
    """Copies of ``good`` with random bytes, random big counts or a cut, all inside its header."""
    rng = random.Random(seed)
    for _ in range(MUTANTS_PER_SEED):
        raw = bytearray(good)
        kind = rng.randrange(3)
        at = rng.randrange(header)
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(header)] = rng.randrange(256)
        elif kind == 1 and at + 8 <= header:
            struct.pack_into("<Q", raw, at, rng.choice([2**62, 2**64 - 1, 2**32 - 1, 2**31, rng.randrange(2**40)]))
        else:
            raw = raw[:at]
        yield bytes(raw)


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_fuzzed_files_load_or_raise_one_clear_value_error(tmp_path, seed):
    good = (tmp_path / "good.gguf")
    _tiny(good)
    with GGUFFile(good) as reader:
        header = min(int(t.data.ctypes.data) for t in reader.tensors.values()) - int(reader._map.ctypes.data)
    loaded = rejected = 0
    path = tmp_path / "mutant.gguf"
    for raw in _mutants(good.read_bytes(), header, seed):
        path.write_bytes(raw)
        tracemalloc.start()
        try:
            _read(str(path))
            loaded += 1
        except ValueError as e:
            _, peak = tracemalloc.get_traced_memory()
            assert str(e).startswith(f"{path}: ") and "\n" not in str(e), str(e)
            assert peak <= 2 * header + WALK_OVERHEAD, (peak, header, str(e))
            rejected += 1
        finally:
            tracemalloc.stop()
    assert rejected > MUTANTS_PER_SEED // 2 and loaded + rejected == MUTANTS_PER_SEED

