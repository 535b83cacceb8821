"""Megatron-style tensor-parallel layers and the shard arithmetic behind them.

With ``tp`` ranks, rank ``r`` holds:

* column-parallel linears (fused q/k/v, fused gate/up): its rows of the output features; the
  input is replicated, the output stays sharded, no communication.
* row-parallel linears (o_proj, down_proj): its columns of the input features; the partial
  products are summed with one all-reduce, then the (replicated) bias is added once.
* attention: q heads ``[r * h/tp, (r+1) * h/tp)``; KV heads split the same way, or, when there
  are fewer KV heads than ranks, the one KV head its q heads read (replicated on ``tp/kv`` ranks).
* vocab-parallel embedding and LM head: ``ceil(vocab/tp)`` rows each (the last rank's tail is
  zero padding); lookups of ids outside the shard give zeros before an all-reduce, and the
  logits are all-gathered along the vocabulary and cut back to ``vocab_size``.

With ``tp.size == 1`` every layer is the plain one: the collectives are skipped.

Matmuls go through ``linear``: on the CPU, in float32, inputs of at most ``NATIVE_MAX_ROWS`` rows
(decode steps) use ``kernels/cpu_native``'s GEMV, which reads each weight row once for all rows
(MKL's small-M sgemm reads the weights once per row); larger inputs use ``F.linear``.

``LoadedModules``: what a loader (GGUF blocks) or int8 quantization built to replace these float
layers, the embedding and the LM head; the model puts them in place (``LlamaForCausalLM.install``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from radixlm.kernels import cpu_native
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.parallel.distributed import TPGroup
from torch import nn

NATIVE_MAX_ROWS = 64  # up to this many rows the native GEMV (weights read once for all rows) beats MKL


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           add: torch.Tensor | None = None) -> torch.Tensor:
    """``x [..., K] @ weight[N, K].T (+ bias) (+ add)`` -> ``[..., N]``; ``add`` (the residual) has the output's shape.

    The native GEMV for few rows (see the module doc), else ``F.linear`` then an in-place add
    (``y + add`` rounds exactly as ``add + y``).
    """
    if x.dim() == 2 and x.shape[0] <= NATIVE_MAX_ROWS and cpu_native.usable(x, weight):
        if (bias is None or cpu_native.usable(bias)) and (add is None or cpu_native.usable(add)):
            return cpu_native.linear(x, weight, bias, add)
    y = F.linear(x, weight, bias)
    return y if add is None else y.add_(add)


def empty_param(*shape: int, dtype: torch.dtype, device: torch.device | str) -> nn.Parameter:
    """An uninitialised frozen parameter (the loader fills it)."""
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


def check_tp_size(config: ModelConfig, tp_size: int) -> None:
    """Raise ``ValueError`` naming ``tp_size`` when ``config`` cannot be split ``tp_size`` ways."""
    if not isinstance(tp_size, int) or isinstance(tp_size, bool) or tp_size < 1:
        raise ValueError(f"tp_size must be an integer >= 1, got {tp_size!r}")
    if config.num_heads % tp_size:
        raise ValueError(f"tp_size {tp_size} must divide num_attention_heads ({config.num_heads})")
    kv = config.num_kv_heads
    if kv >= tp_size and kv % tp_size:
        raise ValueError(f"tp_size {tp_size} must divide num_key_value_heads ({kv})")
    if kv < tp_size and tp_size % kv:
        raise ValueError(f"tp_size {tp_size} must be a multiple of num_key_value_heads ({kv}) "
                         f"when the KV heads are replicated")
    if config.intermediate_size % tp_size:
        raise ValueError(f"tp_size {tp_size} must divide intermediate_size ({config.intermediate_size})")


@dataclass(frozen=True)
class AttentionShard:
    """The q heads ``[q_start, q_start + num_heads)`` and KV heads ``[kv_start, kv_start + num_kv_heads)``
    one rank holds (all heads when ``tp == 1``)."""

    num_heads: int
    num_kv_heads: int
    q_start: int
    kv_start: int

    @classmethod
    def for_rank(cls, num_heads: int, num_kv_heads: int, rank: int, size: int) -> AttentionShard:
        q_local = num_heads // size
        if num_kv_heads >= size:
            kv_local = num_kv_heads // size
            return cls(q_local, kv_local, rank * q_local, rank * kv_local)
        # fewer KV heads than ranks: q heads of one rank all read KV head (first q head) // group
        group = num_heads // num_kv_heads
        return cls(q_local, 1, rank * q_local, rank * q_local // group)


@dataclass(frozen=True)
class VocabShard:
    """Rank's vocabulary rows ``[start, end)``, held in ``rows`` parameter rows (``end - start`` real
    ones, then zero padding so that every rank's shard has the same shape)."""

    vocab_size: int
    rows: int
    start: int
    end: int

    @classmethod
    def for_rank(cls, vocab_size: int, rank: int, size: int) -> VocabShard:
        rows = -(-vocab_size // size)
        start = min(rank * rows, vocab_size)
        return cls(vocab_size, rows, start, min(start + rows, vocab_size))

    def empty_param(self, hidden_size: int, dtype: torch.dtype, device: torch.device | str) -> nn.Parameter:
        """``[rows, hidden_size]`` with the padding rows zeroed (the loader fills the rest)."""
        param = empty_param(self.rows, hidden_size, dtype=dtype, device=device)
        param.data[self.end - self.start:].zero_()
        return param


class Linear(nn.Module):
    """``y = x @ weight.T (+ bias)`` with weight ``[out_features, in_features]``.

    Used as is for replicated layers and as the column-parallel linear: a rank's weight is its
    rows of the full one, its output its slice of the output features.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        super().__init__()
        self.weight = empty_param(out_features, in_features, dtype=dtype, device=device)
        self.bias = empty_param(out_features, dtype=dtype, device=device) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


ColumnParallelLinear = Linear


class RowParallelLinear(Linear):
    """Weight ``[out_features, in_features / tp]`` (this rank's columns); input sharded the same way.

    ``y = all_reduce(x_r @ W_r.T) + bias``: the bias is replicated and added after the sum.
    ``forward(x, residual)`` adds the residual ``[num_tokens, out_features]`` last (fused into the
    matmul when ``tp == 1``).
    """

    def __init__(self, in_features_local: int, out_features: int, bias: bool, tp: TPGroup,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__(in_features_local, out_features, bias, dtype, device)
        self.tp = tp

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.tp.size == 1:
            return linear(x, self.weight, self.bias, residual)
        y = self.tp.all_reduce(linear(x, self.weight))  # [num_tokens, out_features]
        y = y if self.bias is None else y + self.bias
        return y if residual is None else y.add_(residual)


def vocab_parallel_embedding(ids: torch.Tensor, weight: torch.Tensor, shard: VocabShard,
                             tp: TPGroup) -> torch.Tensor:
    """ids ``[n]`` -> embeddings ``[n, hidden]``; ``weight`` is this rank's ``[shard.rows, hidden]``."""
    if tp.size == 1:
        return F.embedding(ids, weight)
    outside = (ids < shard.start) | (ids >= shard.end)  # [n]
    local = torch.where(outside, 0, ids - shard.start)
    out = F.embedding(local, weight).masked_fill_(outside.unsqueeze(-1), 0.0)  # [n, hidden]
    return tp.all_reduce(out)


def parallel_lm_head(hidden: torch.Tensor, weight: torch.Tensor, vocab_size: int,
                     tp: TPGroup) -> torch.Tensor:
    """hidden ``[n, hidden]`` -> float32 logits ``[n, vocab_size]`` on every rank."""
    logits = linear(hidden, weight)  # [n, shard.rows]
    if tp.size > 1:
        logits = tp.all_gather(logits)[:, :vocab_size]  # [n, vocab_size]
    return logits.float()


@dataclass
class LoadedModules:
    """Modules built in place of a model's float ones, for ``LlamaForCausalLM.install``: linears by
    qualified name (``layers.0.qkv_proj``), and an embedding and LM head (their float weights dropped)."""

    linears: dict[str, nn.Module] = field(default_factory=dict)
    embedding: nn.Module | None = None
    lm_head: nn.Module | None = None
