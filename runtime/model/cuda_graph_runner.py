"""Decode CUDA graphs: one captured graph per batch-size bucket, replayed with the batch padded.

A decode step's forward launches hundreds of small kernels; at small batch the host's launch
overhead, not the GPU, sets the speed. ``DecodeGraphRunner`` captures the forward once per bucket
(``graph_buckets``: 1, 2, 4, 8, then every 8 up to ``cuda_graph_max_bs``) over static input
buffers, and for each decode batch of ``bs`` requests picks the smallest bucket ``B >= bs``,
copies the batch into the buffers, pads rows ``bs .. B-1`` and replays; the logits of the real
rows come back (``[bs, vocab]``). Padding rows are harmless by construction:

- input id 0 at position 0, its K/V stored into slot 0 (``SlotAllocator`` never hands slot 0 out);
- a context of one key, slot 0 (``kv_indptr`` grows by 1 per padding row, ``kv_indices`` gets a 0);
- request row 0 (the forward never reads the req_to_token table: ``ForwardBatch.from_spec``
  already gathered ``kv_indices`` for the real rows).

``kv_indices`` is a static buffer of ``max_bs * max_context_len`` entries of which the kernels
read only ``kv_indptr[-1]``. Batches larger than the largest bucket, extend batches and batches
with cascade attention (``shared_prefix_len``) run eagerly (``can_run`` says which).

``graph_factory`` makes the graph objects: ``CudaGraph`` (``torch.cuda.CUDAGraph``) on CUDA; the
CPU tests pass ``EagerReplayGraph``, which re-runs the captured function on replay, so bucketing,
padding and un-padding are checked end to end against the eager forward without a GPU.

``gpu_feature_enabled``: whether the GPU decode speed-ups (CUDA graphs, overlap scheduling) are on. Both are meant for CUDA and are on there by default (``--disable-cuda-graph`` /
``--disable-overlap-schedule`` turn them off), but only once they have been verified on a device:
until then ``VERIFIED_ON_CUDA`` is False and they stay off unless the environment
variable ``RADIXLM_UNVERIFIED_GPU_FEATURES=1`` asks for them (``benchmarks/gpu_check.sh`` sets it
to measure them on and off; the CPU tests set it to run the overlapped loop). On the CPU, CUDA
graphs never run (there is nothing to capture); the tests drive the bucketing and padding with a
fake graph instead.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from typing import Protocol

import torch
from radixlm.runtime.model.forward_batch import ForwardBatch

Forward = Callable[[ForwardBatch], torch.Tensor]


def graph_buckets(max_bs: int) -> list[int]:
    """Captured batch sizes: 1, 2, 4, 8, then every 8 up to ``max_bs`` (always included)."""
    if max_bs < 1:
        raise ValueError(f"cuda_graph_max_bs must be >= 1, got {max_bs}")
    buckets = [b for b in (1, 2, 4, 8) if b <= max_bs] + list(range(16, max_bs + 1, 8))
    if buckets[-1] != max_bs:
        buckets.append(max_bs)
    return buckets


def pick_bucket(buckets: list[int], bs: int) -> int | None:
    """The smallest bucket holding ``bs`` rows, or None when ``bs`` exceeds them all (eager)."""
    i = bisect.bisect_left(buckets, bs)
    return buckets[i] if i < len(buckets) else None


class Graph(Protocol):
    """What ``DecodeGraphRunner`` needs of a graph: capture a function once, replay it."""

    def capture(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor: ...

    def replay(self) -> None: ...


class CudaGraph:
    """``torch.cuda.CUDAGraph`` behind ``Graph``; every graph of a runner shares one memory pool."""

    def __init__(self, pool: object, stream: torch.cuda.Stream) -> None:
        self.graph = torch.cuda.CUDAGraph()
        self.pool = pool
        self.stream = stream

    def capture(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        with torch.cuda.stream(self.stream):  # warm-up outside the graph: lazy inits, autotuning
            fn()
            fn()
        self.stream.synchronize()
        with torch.cuda.graph(self.graph, pool=self.pool, stream=self.stream):
            out = fn()
        return out

    def replay(self) -> None:
        self.graph.replay()


def cuda_graph_factory() -> Callable[[], CudaGraph]:
    """Graphs on the current CUDA device sharing one pool and one capture stream."""
    pool, stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream()
    return lambda: CudaGraph(pool, stream)


class EagerReplayGraph:
    """A stand-in for CPU tests: replay re-runs the captured function into the same output tensor."""

    def __init__(self) -> None:
        self.fn: Callable[[], torch.Tensor] | None = None
        self.out: torch.Tensor | None = None
        self.replays = 0

    def capture(self, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        self.fn = fn
        self.out = fn()
        return self.out

    def replay(self) -> None:
        self.out.copy_(self.fn())
        self.replays += 1


class DecodeGraphRunner:
    """Static decode buffers, one graph per bucket, and the pad / replay / un-pad of a batch."""

    def __init__(self, forward: Forward, max_bs: int, max_context_len: int, device: torch.device,
                 graph_factory: Callable[[], Graph]) -> None:
        self.forward = forward
        self.buckets = graph_buckets(max_bs)
        self.max_bs = self.buckets[-1]
        self.device = device
        self.graph_factory = graph_factory
        self.kv_capacity = self.max_bs * max_context_len

        def zeros(n: int) -> torch.Tensor:
            return torch.zeros(n, dtype=torch.int64, device=device)

        self.input_ids, self.positions = zeros(self.max_bs), zeros(self.max_bs)
        self.out_cache_loc, self.req_pool_indices = zeros(self.max_bs), zeros(self.max_bs)
        self.kv_indptr = torch.arange(self.max_bs + 1, dtype=torch.int64, device=device)
        self.kv_indices = zeros(self.kv_capacity)
        self.arange = torch.arange(self.max_bs + 1, dtype=torch.int64, device=device)  # qo_indptr, logits rows
        self.graphs: dict[int, Graph] = {}
        self.outputs: dict[int, torch.Tensor] = {}

    def static_batch(self, bucket: int) -> ForwardBatch:
        """The ``ForwardBatch`` over the static buffers that the ``bucket`` graph was captured with."""
        return ForwardBatch(
            is_decode=True, batch_size=bucket, input_ids=self.input_ids[:bucket],
            positions=self.positions[:bucket], out_cache_loc=self.out_cache_loc[:bucket],
            qo_indptr=self.arange[:bucket + 1], kv_indptr=self.kv_indptr[:bucket + 1],
            kv_indices=self.kv_indices, logits_indices=self.arange[:bucket],
            req_pool_indices=self.req_pool_indices[:bucket], max_extend_len=1, shared_prefix_len=0)

    def capture(self) -> None:
        """Capture every bucket, largest first (the smaller graphs then fit in its memory pool).

        The buffers hold an all-padding batch meanwhile: every row writes and reads slot 0 only.
        """
        self._pad_from(0, 0, self.max_bs)
        for bucket in reversed(self.buckets):
            fb = self.static_batch(bucket)
            graph = self.graph_factory()
            self.outputs[bucket] = graph.capture(lambda fb=fb: self.forward(fb))
            self.graphs[bucket] = graph

    def can_run(self, fb: ForwardBatch) -> bool:
        """A decode batch that fits a bucket and needs no cascade attention (else: eager)."""
        return (fb.is_decode and fb.batch_size <= self.max_bs and fb.shared_prefix_len == 0
                and fb.kv_indices.shape[0] + self.max_bs <= self.kv_capacity)

    def replay(self, fb: ForwardBatch) -> torch.Tensor:
        """Logits ``[bs, vocab]`` of ``fb`` (``can_run(fb)`` must hold) through its bucket's graph."""
        bs = fb.batch_size
        bucket = pick_bucket(self.buckets, bs)
        self.load(fb, bucket)
        self.graphs[bucket].replay()
        return self.outputs[bucket][:bs].clone()  # the next replay overwrites the static output

    def load(self, fb: ForwardBatch, bucket: int) -> None:
        """Copy ``fb`` into the static buffers and pad rows ``bs .. bucket - 1``."""
        bs, total = fb.batch_size, fb.kv_indices.shape[0]
        self.input_ids[:bs].copy_(fb.input_ids)
        self.positions[:bs].copy_(fb.positions)
        self.out_cache_loc[:bs].copy_(fb.out_cache_loc)
        self.req_pool_indices[:bs].copy_(fb.req_pool_indices)
        self.kv_indptr[:bs + 1].copy_(fb.kv_indptr)
        self.kv_indices[:total].copy_(fb.kv_indices)
        self._pad_from(bs, total, bucket)

    def _pad_from(self, bs: int, total_kv: int, bucket: int) -> None:
        """Rows ``bs .. bucket - 1``: token 0 at position 0 in slot 0, attending to slot 0 alone."""
        n = bucket - bs
        if n == 0:
            return
        for buf in (self.input_ids, self.positions, self.out_cache_loc, self.req_pool_indices):
            buf[bs:bucket].zero_()
        self.kv_indptr[bs + 1:bucket + 1] = self.arange[1:n + 1] + total_kv
        self.kv_indices[total_kv:total_kv + n].zero_()


VERIFIED_ON_CUDA = False  # flip once a device run of benchmarks/gpu_check.sh is green
UNVERIFIED_ENV = "RADIXLM_UNVERIFIED_GPU_FEATURES"


def gpu_feature_enabled(disabled: bool, device: torch.device, *, needs_cuda: bool) -> bool:
    """True when a feature the user did not ``disabled`` should run on ``device``.

    ``needs_cuda``: the feature cannot run anywhere else (CUDA graphs); otherwise the override
    also turns it on on the CPU (the overlapped step loop, for tests).
    """
    if disabled:
        return False
    forced = os.environ.get(UNVERIFIED_ENV) == "1"
    if device.type != "cuda":
        return forced and not needs_cuda
    return VERIFIED_ON_CUDA or forced
