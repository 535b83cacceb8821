"""llama.cpp in its best configuration for shared-prefix batches: parallel sequences over one unified KV cache.

Through ``llama-cpp-python``'s low-level API (the C functions, no ``Llama`` wrapper): one context
with ``n_seq_max`` sequences and ``kv_unified=True`` (one KV buffer for every sequence, so cells
copied with ``llama_memory_seq_cp`` are shared, not duplicated). ``generate`` prefills the prompts'
common prefix once in sequence 0, shares it with the other sequences, then runs the requests in
waves of ``n_parallel``: their distinct suffixes packed into ``n_batch``-token ``llama_decode``
calls, then one batched ``llama_decode`` per new token for the whole wave. Greedy is an argmax over
llama.cpp's logits (EOS ignored). ``score`` does the same for few-shot choice scoring: the mean
log-probability of each row's choice tokens. ``parallel_plan.py`` lays the tokens out.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from suites.parallel_plan import SeqWork, decode_step, mean_logprob, pack, shared_prefix_len, waves
from suites.systems import Generation

SWEEP = (8, 16, 32, 64)


class LlamaCppParallel:
    """``generate`` / ``score`` / ``reset`` over one llama.cpp context with ``max(sweep)`` sequences."""

    def __init__(self, name: str, gguf_path: Path, sweep: Sequence[int] = SWEEP, n_ctx: int = 16384,
                 n_batch: int = 512):
        import llama_cpp as lc
        from llama_cpp._logger import set_verbose

        set_verbose(False)  # llama.cpp's load/context logs, which ``Llama(verbose=False)`` also silences
        self.lc, self.name, self.gguf_path = lc, name, gguf_path
        self.sweep = tuple(sweep)
        self.n_parallel = max(self.sweep)
        self.n_batch = n_batch
        lc.llama_backend_init()
        self.model = lc.llama_model_load_from_file(str(gguf_path).encode(), lc.llama_model_default_params())
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf_path}")
        params = lc.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_seq_max = self.n_parallel
        params.n_threads = params.n_threads_batch = os.cpu_count() or 1  # as torch gets: every core
        params.kv_unified = True
        params.no_perf = True
        self.ctx = lc.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context for {gguf_path}")
        self.mem = lc.llama_get_memory(self.ctx)
        self.n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))
        self.batch = lc.llama_batch_init(max(n_batch, self.n_parallel), 0, 1)

    # -- llama.cpp calls -------------------------------------------------------------------------
    def _decode(self, entries) -> np.ndarray:
        """One ``llama_decode`` of ``entries``; returns the logits rows ([outputs, vocab]) it produced."""
        b = self.batch
        for i, e in enumerate(entries):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = e.token, e.pos, 1, e.logits
            b.seq_id[i][0] = e.seq
        b.n_tokens = len(entries)
        status = self.lc.llama_decode(self.ctx, b)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status} ({len(entries)} tokens; KV cache full?)")
        n_out = sum(e.logits for e in entries)
        if not n_out:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        ptr = ctypes.cast(self.lc.llama_get_logits(self.ctx), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))

    def _run(self, work: list[SeqWork]) -> dict[tuple[int, int], np.ndarray]:
        """Evaluate ``work`` in packed calls; the logits row (a copy) of every wanted (work, token) index."""
        rows: dict[tuple[int, int], np.ndarray] = {}
        for entries, outputs in pack(work, self.n_batch):
            logits = self._decode(entries)
            for key, row in zip(outputs, logits):
                rows[key] = row.copy()
        return rows

    def _share_prefix(self, prefix: Sequence[int], seqs: int) -> None:
        """Prefill ``prefix`` in sequence 0 (when not there yet) and share its cells with 1..seqs-1."""
        if prefix and self.lc.llama_memory_seq_pos_max(self.mem, 0) < len(prefix) - 1:
            self._run([SeqWork(0, prefix, 0, ())])
        for s in range(1, seqs):
            self.lc.llama_memory_seq_cp(self.mem, 0, s, -1, -1)

    def _release(self, seqs: int, keep: int) -> None:
        """Drop the wave's own cells: sequence 0 keeps the shared prefix, the others are emptied."""
        self.lc.llama_memory_seq_rm(self.mem, 0, keep, -1)
        for s in range(1, seqs):
            self.lc.llama_memory_seq_rm(self.mem, s, -1, -1)

    # -- the system contract ---------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> Generation:
        """Greedy ``max_new_tokens`` per prompt; the common prefix is evaluated once per call."""
        self.reset()
        shared = shared_prefix_len(prompts)
        outputs: list[list[int]] = [[] for _ in prompts]
        for wave in waves(len(prompts), self.n_parallel):
            self._share_prefix(prompts[0][:shared], len(wave))
            work = [SeqWork(s, prompts[r][shared:], shared, (len(prompts[r]) - shared - 1,))
                    for s, r in enumerate(wave)]
            first = self._run(work)
            last = [int(first[(s, w.want[0])].argmax()) for s, w in enumerate(work)]
            pos = [len(prompts[r]) for r in wave]
            for s, r in enumerate(wave):
                outputs[r].append(last[s])
            for _ in range(max_new_tokens - 1):
                logits = self._decode(decode_step(last, pos, range(len(wave))))
                last = [int(i) for i in logits.argmax(axis=1)]
                pos = [p + 1 for p in pos]
                for s, r in enumerate(wave):
                    outputs[r].append(last[s])
            self._release(len(wave), shared)
        return Generation(outputs=outputs, prompt_tokens=sum(len(p) for p in prompts),
                          cached_tokens=shared * (len(prompts) - 1), extra={"n_parallel": self.n_parallel})

    def score(self, rows: list[tuple[list[int], int]]) -> list[float]:
        """Mean log-probability of ``ids[start:]`` for every ``(ids, start)`` row (``start >= 1``)."""
        self.reset()
        shared = shared_prefix_len([ids for ids, _ in rows], limit=min(start for _, start in rows) - 1)
        scores: list[float] = [0.0] * len(rows)
        for wave in waves(len(rows), self.n_parallel):
            self._share_prefix(rows[0][0][:shared], len(wave))
            work = []
            for s, r in enumerate(wave):
                ids, start = rows[r]
                work.append(SeqWork(s, ids[shared:], shared, tuple(range(start - 1 - shared, len(ids) - 1 - shared))))
            logits = self._run(work)
            for s, r in enumerate(wave):
                ids, start = rows[r]
                scores[r] = mean_logprob(np.stack([logits[(s, i)] for i in work[s].want]), ids[start:])
            self._release(len(wave), shared)
        return scores

    def decode_rate(self, prompts: list[list[int]], new_tokens: int) -> float:
        """Decode tokens/s of ``prompts`` run together (one sequence each), timing only the decode steps."""
        self.reset()
        work = [SeqWork(s, p, 0, (len(p) - 1,)) for s, p in enumerate(prompts)]
        first = self._run(work)
        last = [int(first[(s, len(p) - 1)].argmax()) for s, p in enumerate(prompts)]
        pos = [len(p) for p in prompts]
        start = time.perf_counter()
        for _ in range(new_tokens):
            last = [int(i) for i in self._decode(decode_step(last, pos, range(len(prompts)))).argmax(axis=1)]
            pos = [p + 1 for p in pos]
        seconds = time.perf_counter() - start
        self.reset()
        return len(prompts) * new_tokens / seconds

    def reset(self) -> None:
        """Empty the KV cache (every repetition starts cold, the shared prefix included)."""
        self.lc.llama_memory_clear(self.mem, True)

    def close(self) -> None:
        if self.batch is not None:
            self.lc.llama_batch_free(self.batch)
            self.lc.llama_free(self.ctx)
            self.lc.llama_model_free(self.model)
            self.batch = None
