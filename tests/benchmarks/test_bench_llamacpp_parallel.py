"""``LlamaCppParallel`` (benchmarks/suites/llamacpp_batched.py) against a fake ``llama_cpp`` module.

The fake keeps a unified KV cache the way llama.cpp does (cells tagged with sequence sets, positions
required to continue each sequence) and its "model" predicts the next token from the whole visible
context, so a sequence that sees a wrong, missing or foreign token yields different tokens. The
adapter's greedy outputs and choice scores must equal those computed on each prompt alone, with the
shared prefix evaluated once per call, for any number of parallel sequences.
"""

from __future__ import annotations

import ctypes
import sys
import types
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

VOCAB = 50


def context_logits(context: tuple[int, ...]) -> np.ndarray:
    """The fake model: a pseudo-random logits row determined by the whole context."""
    seed = zlib.crc32(np.asarray(context, dtype=np.int64).tobytes())
    return np.random.default_rng(seed).normal(size=VOCAB).astype(np.float32)


def reference_generate(prompt: list[int], n: int) -> list[int]:
    out, ctx = [], list(prompt)
    for _ in range(n):
        out.append(int(context_logits(tuple(ctx)).argmax()))
        ctx.append(out[-1])
    return out


class FakeLlamaCpp(types.ModuleType):
    """The slice of ``llama_cpp`` the adapter calls, over an in-memory unified KV cache."""

    def __init__(self):
        super().__init__("llama_cpp")
        self.cells: list[tuple[int, int, set[int]]] = []  # (pos, token, sequences)
        self.evaluated = 0
        self.freed = False
        self._logits = None

    # set-up / tear-down
    def llama_backend_init(self): pass
    def llama_model_default_params(self): return SimpleNamespace()
    def llama_context_default_params(self): return SimpleNamespace()
    def llama_model_load_from_file(self, path, params): return object()
    def llama_init_from_model(self, model, params):
        self.params = params
        return object()
    def llama_get_memory(self, ctx): return "mem"
    def llama_model_get_vocab(self, model): return "vocab"
    def llama_vocab_n_tokens(self, vocab): return VOCAB
    def llama_batch_free(self, batch): self.freed = True
    def llama_free(self, ctx): pass
    def llama_model_free(self, model): pass

    def llama_batch_init(self, n, embd, n_seq_max):
        return SimpleNamespace(token=[0] * n, pos=[0] * n, n_seq_id=[0] * n, logits=[0] * n,
                               seq_id=[[0] for _ in range(n)], n_tokens=0)

    # memory
    def llama_memory_clear(self, mem, data): self.cells.clear()
    def llama_memory_seq_pos_max(self, mem, seq):
        return max((p for p, _, seqs in self.cells if seq in seqs), default=-1)
    def llama_memory_seq_cp(self, mem, src, dst, p0, p1):
        assert (p0, p1) == (-1, -1)
        for _, _, seqs in self.cells:
            if src in seqs:
                seqs.add(dst)
    def llama_memory_seq_rm(self, mem, seq, p0, p1):
        lo, hi = (0 if p0 < 0 else p0), (1 << 30 if p1 < 0 else p1)
        self.cells = [(p, t, seqs - {seq} if lo <= p < hi else seqs) for p, t, seqs in self.cells]
        self.cells = [c for c in self.cells if c[2]]
        return True

    # compute
    def llama_decode(self, ctx, b):
        assert b.n_tokens <= self.params.n_batch
        rows = []
        for i in range(b.n_tokens):
            seq, pos = b.seq_id[i][0], b.pos[i]
            assert b.n_seq_id[i] == 1 and seq < self.params.n_seq_max
            assert pos == self.llama_memory_seq_pos_max("mem", seq) + 1, "positions must continue the sequence"
            self.cells.append((pos, b.token[i], {seq}))
            self.evaluated += 1
            if b.logits[i]:
                visible = sorted((p, t) for p, t, seqs in self.cells if seq in seqs)
                rows.append(context_logits(tuple(t for _, t in visible)))
        self._logits = (ctypes.c_float * (len(rows) * VOCAB))(*np.concatenate(rows or [np.zeros(0)]).tolist())
        return 0

    def llama_get_logits(self, ctx):
        return self._logits


@pytest.fixture
def fake(monkeypatch):
    module = FakeLlamaCpp()
    monkeypatch.setitem(sys.modules, "llama_cpp", module)
    monkeypatch.setitem(sys.modules, "llama_cpp._logger", SimpleNamespace(set_verbose=lambda verbose: None))
    return module


def _prompts(n: int) -> list[list[int]]:
    shared = [3, 1, 4, 1, 5, 9, 2, 6]
    return [shared + [10 + i % 7, 20 + i % 5][: 1 + i % 2] for i in range(n)]


@pytest.mark.parametrize(("n_parallel", "n_batch"), [(1, 512), (3, 4), (8, 512)])
def test_generate_equals_each_prompt_alone(fake, n_parallel, n_batch):
    from suites.llamacpp_batched import LlamaCppParallel

    system = LlamaCppParallel("llama.cpp", Path("m.gguf"), sweep=(8,), n_batch=n_batch)
    assert fake.params.kv_unified is True and fake.params.n_seq_max == 8
    system.n_parallel = n_parallel
    prompts = _prompts(7)
    gen = system.generate(prompts, 5)
    assert gen.outputs == [reference_generate(p, 5) for p in prompts]
    assert gen.cached_tokens == 8 * 6 and gen.prompt_tokens == sum(map(len, prompts))
    # the prefix once, each suffix once, then 4 decode steps per request
    assert fake.evaluated == 8 + sum(len(p) - 8 for p in prompts) + 7 * 4
    # afterwards only the shared prefix is left, in sequence 0
    assert sorted((p, t) for p, t, _ in fake.cells) == list(enumerate(prompts[0][:8]))
    assert all(seqs == {0} for _, _, seqs in fake.cells)
    system.close()
    assert fake.freed


def test_score_equals_log_softmax_of_each_row_alone(fake):
    from suites.llamacpp_batched import LlamaCppParallel
    from suites.parallel_plan import mean_logprob

    system = LlamaCppParallel("llama.cpp", Path("m.gguf"), sweep=(2,), n_batch=5)
    rows = [(p + [30 + i, 31 + i], len(p)) for i, p in enumerate(_prompts(5))]
    expected = []
    for ids, start in rows:
        logits = np.stack([context_logits(tuple(ids[: i + 1])) for i in range(start - 1, len(ids) - 1)])
        expected.append(mean_logprob(logits, ids[start:]))
    assert system.score(rows) == pytest.approx(expected)


def test_decode_rate_runs_each_prompt_as_its_own_sequence(fake):
    from suites.llamacpp_batched import LlamaCppParallel

    system = LlamaCppParallel("llama.cpp", Path("m.gguf"), sweep=(2,))
    assert system.decode_rate(_prompts(2), 3) > 0
    assert fake.evaluated == sum(map(len, _prompts(2))) + 2 * 3 and fake.cells == []


def test_q8_gguf_is_quantized_once_from_the_f32_file(fake, tmp_path):
    from suites.gguf_files import ensure_gguf, gguf_path_for

    calls = []

    def quantize(src, dst, params):
        calls.append((src, params.ftype))
        Path(dst.decode()).write_bytes(b"q8")
        return 0

    fake.LLAMA_FTYPE_MOSTLY_Q8_0, fake.LLAMA_FTYPE_MOSTLY_Q4_K_M = 7, 15
    fake.llama_model_quantize_default_params = lambda: SimpleNamespace(ftype=0, nthread=0)
    fake.llama_model_quantize = quantize
    checkpoint = tmp_path / "llama-tiny"
    checkpoint.mkdir()
    f32 = gguf_path_for(str(checkpoint), "f32")
    f32.parent.mkdir()
    f32.write_bytes(b"f32")  # already converted: only the quantization runs
    q8 = ensure_gguf(str(checkpoint), "q8_0")
    assert q8 == tmp_path / "gguf" / "llama-tiny-q8_0.gguf" and q8.read_bytes() == b"q8"
    assert calls == [(str(f32).encode(), 7)]
    assert ensure_gguf(str(checkpoint), "q8_0") == q8 and len(calls) == 1  # cached
    assert sorted(p.name for p in q8.parent.iterdir()) == ["llama-tiny-f32.gguf", "llama-tiny-q8_0.gguf"]
    q4 = ensure_gguf(str(checkpoint), "q4_k_m")  # the 1B Q4_K_M fixture's kind: llama.cpp's ftype 15
    assert q4.name == "llama-tiny-q4_k_m.gguf" and calls[-1] == (str(f32).encode(), 15)
    q4.unlink()
    fake.llama_model_quantize = lambda src, dst, params: 3
    q8.unlink()
    with pytest.raises(RuntimeError, match="returned 3"):
        ensure_gguf(str(checkpoint), "q8_0")
    assert sorted(p.name for p in q8.parent.iterdir()) == ["llama-tiny-f32.gguf"]  # no half-made file
    with pytest.raises(ValueError, match="kind"):
        gguf_path_for(str(checkpoint), "q4")
