"""Tensor parallelism on the CPU (gloo): the parallel layers and a sharded model against the
unsharded ones in two spawned ranks, and ``Engine(tp_size=2)`` against ``tp_size=1`` end to end
(greedy outputs and prompt logprobs, chunked prefill, radix-cache hits, worker death)."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from radixlm.runtime import free_port
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.model_loader import load_model
from radixlm.runtime.model.parallel.distributed import TPGroup, decode_spec, encode_spec
from radixlm.runtime.model.parallel.layers import (
    AttentionShard,
    RowParallelLinear,
    VocabShard,
    check_tp_size,
    parallel_lm_head,
    vocab_parallel_embedding,
)
from radixlm.runtime.scheduler.batch import BatchSpec

PROMPT = [5, 300, 41, 977, 12, 8, 2000, 63, 77, 1500, 4, 9]


def test_spec_wire_format_round_trips():
    spec = BatchSpec(False, [3, 1], [7, 8, 9, 10], [2, 0], [3, 1], [11, 12, 13, 14], [2, 3],
                     table_writes=[(3, 0, [5, 6]), (1, 0, [])])
    assert decode_spec(encode_spec(spec)) == spec
    decode = BatchSpec(True, [0], [42], [17], [1], [99], [0])
    assert decode_spec(encode_spec(decode)) == decode
    assert encode_spec(None)[0] == 0


def test_shards_cover_heads_and_vocab():
    # 8 q heads, 1 KV head over 4 ranks: every rank holds (a replica of) KV head 0
    assert [AttentionShard.for_rank(8, 1, r, 4).kv_start for r in range(4)] == [0, 0, 0, 0]
    # 8 q heads, 2 KV heads over 4 ranks: q heads 0-3 read KV head 0, 4-7 read KV head 1
    assert [AttentionShard.for_rank(8, 2, r, 4) for r in (1, 2)] == [AttentionShard(2, 1, 2, 0),
                                                                      AttentionShard(2, 1, 4, 1)]
    shards = [VocabShard.for_rank(10, r, 3) for r in range(3)]
    assert [(s.start, s.end, s.rows) for s in shards] == [(0, 4, 4), (4, 8, 4), (8, 10, 4)]


def test_tp_size_that_does_not_divide_the_model_is_rejected(tiny_llama):
    config = ModelConfig.from_path(tiny_llama)  # 8 heads, 4 KV heads, intermediate 688
    check_tp_size(config, 4)
    with pytest.raises(ValueError, match="tp_size 3 must divide num_attention_heads"):
        check_tp_size(config, 3)
    with pytest.raises(ValueError, match="tp_size 8 must be a multiple of num_key_value_heads"):
        check_tp_size(ModelConfig.from_dict({**_raw(tiny_llama), "num_key_value_heads": 3,
                                             "num_attention_heads": 24}), 8)


def _raw(path: str) -> dict:
    import json
    import os

    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------------- two spawned ranks


def _assert_close(got: torch.Tensor, want: torch.Tensor, atol: float = 1e-5) -> None:
    # not torch.testing.assert_close: its first call imports for seconds in every spawned rank
    assert got.shape == want.shape, (got.shape, want.shape)
    err = (got - want).abs().max().item()
    assert err <= atol, f"max abs error {err} > {atol}"


def _check_layers(tp: TPGroup) -> None:
    """Row-parallel linear, vocab-parallel embedding and LM head against the plain ops."""
    torch.manual_seed(0)  # the same full weights on every rank
    x, w, b = torch.randn(5, 12), torch.randn(7, 12), torch.randn(7)
    cols = 12 // tp.size
    row = RowParallelLinear(cols, 7, True, tp, torch.float32, "cpu")
    row.weight.data.copy_(w[:, tp.rank * cols:(tp.rank + 1) * cols])
    row.bias.data.copy_(b)
    _assert_close(row(x[:, tp.rank * cols:(tp.rank + 1) * cols]), F.linear(x, w, b))

    vocab, hidden = 11, 6  # 11 rows over 2 ranks: 6 + 5, one padding row on rank 1
    table = torch.randn(vocab, hidden)
    shard = VocabShard.for_rank(vocab, tp.rank, tp.size)
    local = shard.empty_param(hidden, torch.float32, "cpu")
    local.data[:shard.end - shard.start].copy_(table[shard.start:shard.end])
    ids = torch.tensor([0, 5, 6, 10, 3, 10])
    _assert_close(vocab_parallel_embedding(ids, local, shard, tp), F.embedding(ids, table))
    h = torch.randn(3, hidden)
    _assert_close(parallel_lm_head(h, local, vocab, tp), F.linear(h, table))


def _model_logits(model, kv_heads: int) -> list[torch.Tensor]:
    """Logits of a 12-token prefill (every row), then a 5-token extend on the cached prefix, then a decode."""
    c = model.config
    pool = KVPool(64, c.num_layers, kv_heads, c.head_dim, torch.float32, "cpu")
    table = ReqToTokenTable(2, 64, "cpu")
    n = len(PROMPT)
    specs = [BatchSpec(False, [0], PROMPT, [0], [n], list(range(1, n + 1)), list(range(n))),
             BatchSpec(False, [1], [33, 34, 35, 36, 37], [8], [5], list(range(20, 25)), [0, 4],
                       table_writes=[(1, 0, list(range(1, 9)))]),
             BatchSpec(True, [0, 1], [44, 45], [n, 13], [1, 1], [30, 31], [0, 1])]
    return [model.forward(ForwardBatch.from_spec(s, table, "cpu"), pool) for s in specs]


def _rank_main(rank: int, port: int, paths: list[str]) -> None:
    torch.set_num_threads(1)
    tp = TPGroup.init(rank, 2, port, "cpu")
    try:
        _check_layers(tp)
        for path in paths:
            full, _ = load_model(path, "float32", "cpu", attention_backend="torch")
            shard, _ = load_model(path, "float32", "cpu", attention_backend="torch", tp=tp)
            assert shard.num_kv_heads == max(full.num_kv_heads // 2, 1)
            for got, want in zip(_model_logits(shard, shard.num_kv_heads), _model_logits(full, full.num_kv_heads)):
                _assert_close(got, want, atol=1e-4)
    finally:
        tp.destroy()


def test_parallel_layers_and_sharded_models_match_unsharded(checkpoint, tmp_path):
    from radixlm.runtime.checkpoints.synthetic import make_checkpoint

    # one KV head for two ranks: both ranks hold a replica; tied embeddings shard the LM head too
    replicated = make_checkpoint(tmp_path / "kv1", "llama", "tiny",
                                 overrides={"num_key_value_heads": 1, "num_hidden_layers": 2})
    tied = make_checkpoint(tmp_path / "tied", "qwen3", "tiny",
                           overrides={"tie_word_embeddings": True, "num_hidden_layers": 2})
    paths = [str(replicated), str(tied)]  # (full-size llama and qwen2 shards: the Engine tests below)
    mp.spawn(_rank_main, args=(free_port(), paths), nprocs=2, join=True)


# ---------------------------------------------------------------------- Engine(tp_size=2)

# Long enough for 3 prefill chunks of 16 tokens; the second prompt shares the first's 32-token prefix.
SYSTEM = ("You are a careful assistant. Answer the question in one short sentence and cite the "
          "document you used. ")
PROMPTS = [SYSTEM + "Question: where is the capital of France?", SYSTEM + "Question: what is two plus two?"]
GREEDY = {"temperature": 0.0, "max_new_tokens": 8, "ignore_eos": True}
# a float32 KV cache: the ranks' sharded sums differ from the unsharded ones by float32 rounding, which a
# 16-bit cache would turn into float16 ulps of a stored key (1e-3 in a logprob) beyond the 1e-4 asserted
ENGINE_ARGS = {"device": "cpu", "max_total_tokens": 1024, "chunked_prefill_size": 16, "max_running_requests": 4,
               "kv_cache_dtype": "float32"}


@pytest.fixture(scope="module", params=["llama", "qwen2"])  # qwen2: q/k/v biases split across ranks
def engines(request, checkpoint):
    from radixlm import Engine

    path = checkpoint(request.param, "tiny")
    ref = Engine(path, **ENGINE_ARGS)
    tp = Engine(path, tp_size=2, **ENGINE_ARGS)
    yield ref, tp
    tp.shutdown()
    ref.shutdown()


def _generate(engine, prompts, logprob_start_len: int = 0):
    return engine.generate(prompts, GREEDY, return_logprob=True, logprob_start_len=logprob_start_len)


def _assert_same(got: dict, want: dict) -> None:
    assert got["output_ids"] == want["output_ids"]
    for key in ("input_token_logprobs", "output_token_logprobs"):
        g, w = got["meta_info"][key], want["meta_info"][key]
        assert [t[1] for t in g] == [t[1] for t in w]
        pairs = [(a[0], b[0]) for a, b in zip(g, w) if b[0] is not None]
        assert len(pairs) >= len(w) - 1
        assert max((abs(a - b) for a, b in pairs), default=0.0) < 1e-4, key


def test_tp2_equals_tp1_with_chunked_prefill_and_cache_hit(engines):
    ref, tp = engines
    for engine in engines:
        assert engine.flush_cache()
    first_ref, first_tp = _generate(ref, PROMPTS[0]), _generate(tp, PROMPTS[0])
    assert first_ref["meta_info"]["prompt_tokens"] > 2 * ENGINE_ARGS["chunked_prefill_size"]
    _assert_same(first_tp, first_ref)
    # shares the system prompt; prompt logprobs from position 30 on, so the prefix before may be cached
    second_ref, second_tp = _generate(ref, PROMPTS[1], 30), _generate(tp, PROMPTS[1], 30)
    assert second_tp["meta_info"]["cached_tokens"] > 16
    assert second_tp["meta_info"]["cached_tokens"] == second_ref["meta_info"]["cached_tokens"]
    _assert_same(second_tp, second_ref)


def test_tp2_equals_tp1_on_a_batch(engines):
    ref, tp = engines
    for got, want in zip(_generate(tp, PROMPTS + ["Hello"]), _generate(ref, PROMPTS + ["Hello"])):
        _assert_same(got, want)
    tp.check_no_leak()


def test_tp_size_is_validated():
    from radixlm.runtime.server_args import ServerArgs

    with pytest.raises(ValueError, match="tp_size"):
        ServerArgs(tp_size=0)


def test_dead_worker_fails_requests_instead_of_hanging(engines):
    # last test of each engine pair (pytest keeps file order within a fixture parameter)
    tp = engines[1]
    worker = tp.runner.workers.procs[0]
    worker.kill()
    worker.join(timeout=10)
    for _ in range(2):  # the first failure names the dead worker; later steps fail fast the same way
        with pytest.raises(RuntimeError, match="worker rank 1 .* exited"):
            tp.generate("Hello again", GREEDY)
    tp.shutdown()  # must not hang on the broken group
    assert tp.runner.workers is None and tp.runner.tp.group is None
