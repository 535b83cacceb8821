"""Decode CUDA graphs on the CPU: buckets, padding and un-padding, with a fake graph that replays
eagerly (``EagerReplayGraph``), against the plain eager forward of the real tiny model."""

from __future__ import annotations

import pytest
import torch
from radixlm.runtime.model.cuda_graph_runner import (
    UNVERIFIED_ENV,
    EagerReplayGraph,
    gpu_feature_enabled,
    graph_buckets,
    pick_bucket,
)
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.model_runner import ModelRunner
from radixlm.runtime.scheduler.batch import BatchSpec
from radixlm.runtime.server_args import ServerArgs

MAX_BS = 12  # buckets 1, 2, 4, 8, 12


def test_buckets() -> None:
    assert graph_buckets(1) == [1]
    assert graph_buckets(12) == [1, 2, 4, 8, 12]
    assert graph_buckets(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert graph_buckets(30) == [1, 2, 4, 8, 16, 24, 30]
    with pytest.raises(ValueError, match="cuda_graph_max_bs"):
        graph_buckets(0)


@pytest.mark.parametrize("max_bs", [1, 7, 12, 64, 160])
def test_pick_bucket_every_size(max_bs: int) -> None:
    buckets = graph_buckets(max_bs)
    for bs in range(1, max_bs + 1):
        b = pick_bucket(buckets, bs)
        assert b >= bs and b in buckets
        assert all(c < bs for c in buckets if c < b)  # the smallest that fits
    assert pick_bucket(buckets, max_bs + 1) is None  # eager fallback


def test_off_by_default_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv(UNVERIFIED_ENV, raising=False)
    assert not gpu_feature_enabled(False, cpu, needs_cuda=True)
    assert not gpu_feature_enabled(False, cpu, needs_cuda=False)
    assert not gpu_feature_enabled(False, cuda, needs_cuda=True)  # not verified on a device yet
    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    assert not gpu_feature_enabled(False, cpu, needs_cuda=True)  # no graphs without CUDA
    assert gpu_feature_enabled(False, cpu, needs_cuda=False)
    assert gpu_feature_enabled(False, cuda, needs_cuda=True)
    assert not gpu_feature_enabled(True, cuda, needs_cuda=True)
    args = ServerArgs()
    assert (args.disable_cuda_graph, args.disable_overlap_schedule) == (False, False)
    with pytest.raises(ValueError, match="cuda_graph_max_bs"):
        ServerArgs(cuda_graph_max_bs=0)


@pytest.fixture(scope="module")
def runner(tiny_llama: str) -> ModelRunner:
    vocab = ModelConfig.from_path(tiny_llama).vocab_size
    r = ModelRunner(ServerArgs(device="cpu", max_total_tokens=4096, max_running_requests=32), tiny_llama,
                    vocab, [2])
    assert r.graph_runner is None  # never on the CPU by default
    return r


def _prefill(runner: ModelRunner, lens: list[int], gen: torch.Generator) -> tuple[list[int], list[int]]:
    """Prefill requests of ``lens`` tokens into rows 0..; return their next tokens and slots used."""
    ids = torch.randint(3, runner.vocab_size, (sum(lens),), generator=gen).tolist()
    slots = list(range(1, sum(lens) + 1))
    spec = BatchSpec(False, list(range(len(lens))), ids, [0] * len(lens), lens, slots,
                     BatchSpec.last_token_indices(lens))
    with torch.inference_mode():
        fb = ForwardBatch.from_spec(spec, runner.req_to_token, runner.device)
        logits = runner.model.forward(fb, runner.kv_pool)
    return logits.argmax(-1).tolist(), slots


def _decode_batch(runner: ModelRunner, lens: list[int], next_ids: list[int], first_slot: int) -> ForwardBatch:
    bs = len(lens)
    spec = BatchSpec(True, list(range(bs)), next_ids, lens, [1] * bs, list(range(first_slot, first_slot + bs)),
                     list(range(bs)))
    return ForwardBatch.from_spec(spec, runner.req_to_token, runner.device)


def test_padded_replay_matches_eager_for_every_batch_size(runner: ModelRunner) -> None:
    graphs = runner.enable_decode_graphs(EagerReplayGraph, MAX_BS)
    try:
        assert sorted(graphs.graphs) == [1, 2, 4, 8, 12]
        gen = torch.Generator().manual_seed(0)
        for bs in range(1, MAX_BS + 2):
            lens = [3 + (7 * i) % 11 for i in range(bs)]
            next_ids, slots = _prefill(runner, lens, gen)
            fb = _decode_batch(runner, lens, next_ids, slots[-1] + 1)
            with torch.inference_mode():
                eager = runner.model.forward(fb, runner.kv_pool)
                k_eager = runner.kv_pool.k_buffers[0][1:slots[-1] + 1 + bs].clone()
                if bs > MAX_BS:
                    assert not graphs.can_run(fb)  # falls back to eager
                    continue
                bucket = pick_bucket(graphs.buckets, bs)
                before = graphs.graphs[bucket].replays
                replayed = graphs.replay(fb)
            assert graphs.graphs[bucket].replays == before + 1
            assert replayed.shape == eager.shape == (bs, runner.vocab_size)
            if bucket == bs:  # the same shapes: bit for bit
                assert torch.equal(replayed, eager)
            else:  # CPU GEMMs block differently for another row count: float32 rounding only
                torch.testing.assert_close(replayed, eager, rtol=0, atol=1e-4)
            assert replayed.argmax(-1).tolist() == eager.argmax(-1).tolist()
            # padding only touched slot 0: the prompts' K/V are untouched, the new rows' as eager
            k_now = runner.kv_pool.k_buffers[0][1:slots[-1] + 1 + bs]
            assert torch.equal(k_now[:slots[-1]], k_eager[:slots[-1]])
            torch.testing.assert_close(k_now[slots[-1]:], k_eager[slots[-1]:], rtol=0, atol=1e-4)
    finally:
        runner.graph_runner = None


def test_engine_with_decode_graphs_matches_eager(tiny_llama: str) -> None:
    from radixlm.runtime.engine import Engine

    prompts = [f"Request {i} counts: " + "one two " * (i % 5) for i in range(MAX_BS + 3)]
    params = {"temperature": 0.0, "max_new_tokens": 12, "ignore_eos": True}
    with Engine(tiny_llama, device="cpu", max_total_tokens=8192) as eng:
        plain = eng.generate(prompts, params)
    with Engine(tiny_llama, device="cpu", max_total_tokens=8192) as eng:
        graphs = eng.runner.enable_decode_graphs(EagerReplayGraph, MAX_BS)  # before any request
        small = eng.generate(prompts[:5], params)  # bucket 8, three padding rows
        assert graphs.graphs[8].replays >= params["max_new_tokens"] - 1
        big = eng.generate(prompts, params)  # 15 rows: eager
        assert graphs.graphs[MAX_BS].replays == 0
        eng.check_no_leak()
    assert [o["output_ids"] for o in small] == [o["output_ids"] for o in plain[:5]]
    assert [o["output_ids"] for o in big] == [o["output_ids"] for o in plain]
