"""The token layout of llama.cpp's parallel-sequence configuration, as plain Python (no ``llama_cpp``).

llama.cpp's best configuration for a batch of requests sharing a prompt prefix (what ``llama-server``
does with ``--parallel N`` slots and ``cache_prompt``, and llama.cpp's ``batched`` / ``parallel``
examples): prefill the shared prefix once in sequence 0, share its KV cells with sequences
1..N-1 (``llama_memory_seq_cp`` on a unified KV cache), then run every request as its own sequence,
all of them in the same ``llama_decode`` calls. This module decides which token goes where — the
positions, sequence ids and which rows produce logits — so it can be tested without llama.cpp;
``llamacpp_batched.py`` copies the entries into a ``llama_batch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Entry:
    """One token of a ``llama_batch``: id, position, sequence, and whether llama.cpp returns its logits."""

    token: int
    pos: int
    seq: int
    logits: bool


@dataclass(frozen=True)
class SeqWork:
    """The tokens one sequence still has to evaluate, starting at position ``start``.

    ``want`` holds the indices (into ``tokens``) whose logits are needed, in increasing order.
    """

    seq: int
    tokens: Sequence[int]
    start: int
    want: tuple[int, ...]


def common_prefix_len(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix every prompt starts with (0 for no prompts)."""
    if not prompts:
        return 0
    first, n = prompts[0], min(len(p) for p in prompts)
    for i in range(n):
        if any(p[i] != first[i] for p in prompts):
            return i
    return n


def shared_prefix_len(prompts: Sequence[Sequence[int]], limit: int | None = None) -> int:
    """How many leading tokens to prefill once and share: the common prefix, capped at ``limit``.

    Every sequence must keep at least one token of its own (its last token yields the logits of the
    first new token), so the cap is at most ``min(len(prompt)) - 1``. A single prompt shares nothing.
    """
    if len(prompts) < 2:
        return 0
    cap = min(len(p) for p in prompts) - 1
    if limit is not None:
        cap = min(cap, limit)
    return max(0, min(common_prefix_len(prompts), cap))


def waves(count: int, n_parallel: int) -> list[range]:
    """Request indices in groups of at most ``n_parallel`` (every request of a group runs at once)."""
    if n_parallel < 1:
        raise ValueError(f"n_parallel must be >= 1, got {n_parallel}")
    return [range(lo, min(lo + n_parallel, count)) for lo in range(0, count, n_parallel)]


def pack(work: Sequence[SeqWork], n_batch: int) -> list[tuple[list[Entry], list[tuple[int, int]]]]:
    """Pack the sequences' tokens into ``llama_decode`` calls of at most ``n_batch`` tokens.

    Returns, per call, its entries and ``(index into work, index into that work's tokens)`` for each
    entry that outputs logits, in the order llama.cpp returns them. A sequence may span two calls;
    its tokens stay in order, so llama.cpp's causal mask sees every earlier token of the sequence.
    """
    if n_batch < 1:
        raise ValueError(f"n_batch must be >= 1, got {n_batch}")
    calls: list[tuple[list[Entry], list[tuple[int, int]]]] = []
    entries: list[Entry] = []
    outputs: list[tuple[int, int]] = []
    for w_idx, w in enumerate(work):
        want = set(w.want)
        for i, token in enumerate(w.tokens):
            if len(entries) == n_batch:
                calls.append((entries, outputs))
                entries, outputs = [], []
            entries.append(Entry(int(token), w.start + i, w.seq, i in want))
            if i in want:
                outputs.append((w_idx, i))
    if entries:
        calls.append((entries, outputs))
    return calls


def decode_step(tokens: Sequence[int], positions: Sequence[int], seqs: Sequence[int]) -> list[Entry]:
    """One decode step: every running sequence's last token at its next position, all with logits."""
    return [Entry(int(t), int(p), int(s), True) for t, p, s in zip(tokens, positions, seqs)]


def mean_logprob(logits: np.ndarray, targets: Sequence[int]) -> float:
    """Mean log-probability of ``targets[i]`` under the distribution of row ``logits[i]`` ([rows, vocab])."""
    rows = np.asarray(logits, dtype=np.float64)
    top = rows.max(axis=1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(rows - top).sum(axis=1))
    picked = rows[np.arange(len(targets)), np.asarray(targets, dtype=np.int64)]
    return float((picked - log_z).mean())


def best_setting(rates: dict[int, float]) -> int:
    """The setting with the highest rate (the smaller setting on a tie: less memory for the same speed)."""
    if not rates:
        raise ValueError("no settings were measured")
    return max(sorted(rates), key=lambda k: rates[k])
