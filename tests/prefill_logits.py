"""The logits of every position of one prompt, by one prefill straight through a loaded model (no
engine): what the model tests compare against a reference."""

from __future__ import annotations

import torch
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable
from radixlm.runtime.scheduler.batch import BatchSpec


def prefill_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """``[len(ids), vocab]`` logits of ``model`` (KV pool in the model's float dtype) over ``ids``."""
    c, n = model.config, len(ids)
    pool = KVPool(n + 2, c.num_layers, model.num_kv_heads, c.head_dim, model.norm.weight.dtype, "cpu")
    table = ReqToTokenTable(1, n + 2, "cpu")
    spec = BatchSpec(False, [0], ids, [0], [n], list(range(1, n + 1)), list(range(n)))
    return model.forward(ForwardBatch.from_spec(spec, table, "cpu"), pool)
