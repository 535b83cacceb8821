"""Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) over the paged KV pool.

The four architectures differ only by ``ModelConfig`` flags: ``qkv_bias``/``o_bias`` (Qwen2, or
``attention_bias``), ``qk_norm`` (Qwen3: per-head RMSNorm on q and k before RoPE),
``tie_word_embeddings``, and RoPE scaling. q/k/v are one fused matmul and gate/up another; the
loader fuses the checkpoint's separate tensors through ``checkpoint_layout()``.

Tensor parallelism (``tp``, see ``parallel.layers``): each rank builds only its shard: its q/KV
heads in the fused qkv (column-parallel), its intermediate features in gate/up (column-parallel),
row-parallel o_proj/down_proj, and its vocabulary rows of the embedding and LM head. Norms (Qwen3's
per-head q/k norms included) are replicated. ``checkpoint_layout()`` says which slice of each
checkpoint tensor this rank reads; with ``tp.size == 1`` every slice is the whole tensor.

Parameters are created uninitialised (``torch.empty``): the loader fills every one of them.

On the CPU in float32 the forward asks the native fast path (``native_decode``) once per step and
once per layer whether the fused native decode layer runs it; its norms, RoPE + KV store and
gate/up + SiLU ask it too, and run the torch ops where it answers None.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from radixlm.runtime.model import native_decode
from radixlm.runtime.model.attention import PagedAttention, RotaryEmbedding, apply_rotary
from radixlm.runtime.model.block_linear import BlockLinear
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.parallel.distributed import TPGroup
from radixlm.runtime.model.parallel.layers import (
    AttentionShard,
    ColumnParallelLinear,
    Linear,
    LoadedModules,
    RowParallelLinear,
    VocabShard,
    check_tp_size,
    empty_param,
    parallel_lm_head,
    vocab_parallel_embedding,
)
from torch import nn

__all__ = ["LlamaForCausalLM", "Linear", "RMSNorm", "TensorTarget"]


@dataclass(frozen=True)
class TensorTarget:
    """Where one checkpoint tensor goes.

    The checkpoint tensor must have ``shape``; this rank reads ``[start, start + length)`` of its
    dim ``dim`` (``dim=None``: the whole tensor) and copies that into rows ``row ..`` of ``param``.
    """

    param: nn.Parameter
    row: int
    shape: tuple[int, ...]
    dim: int | None = None
    start: int = 0
    length: int = 0


# HF tensor name -> its target in this rank's model
CheckpointLayout = dict[str, TensorTarget]


def _target(param: nn.Parameter, row: int, shape: tuple[int, ...], dim: int | None = None,
            start: int = 0, length: int = 0) -> TensorTarget:
    """A target whose slice collapses to ``dim=None`` when it covers the whole tensor (tp == 1)."""
    if dim is not None and start == 0 and length == shape[dim]:
        dim = None
    return TensorTarget(param, row, shape, dim, start, length)


class RMSNorm(nn.Module):
    """RMSNorm over the last dim, computed in float32 and cast back before the weight (as HF does)."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        self.eps = eps
        self.weight = empty_param(dim, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        native = native_decode.rmsnorm(x, self.weight, self.eps)
        if native is not None:
            return native
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def _add_linear(proj: nn.Module, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """``residual + proj(x)``: fused into the matmul for our row-parallel linear and GGUF's ``BlockLinear``
    (any module works)."""
    if isinstance(proj, (RowParallelLinear, BlockLinear)):
        return proj(x, residual)
    return residual + proj(x)


class LlamaDecoderLayer(nn.Module):
    """Pre-norm attention block then pre-norm SwiGLU MLP block, each with a residual add."""

    def __init__(self, config: ModelConfig, layer_id: int, attention_backend: str, tp: TPGroup,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        c = config
        self.config, self.tp = c, tp
        self.shard = AttentionShard.for_rank(c.num_heads, c.num_kv_heads, tp.rank, tp.size)
        self.num_heads, self.num_kv_heads, self.head_dim = self.shard.num_heads, self.shard.num_kv_heads, c.head_dim
        self.q_size, self.kv_size = self.num_heads * c.head_dim, self.num_kv_heads * c.head_dim  # local
        self.intermediate_size = c.intermediate_size // tp.size  # local
        kw = {"dtype": dtype, "device": device}
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, **kw)
        self.qkv_proj = ColumnParallelLinear(c.hidden_size, self.q_size + 2 * self.kv_size, c.qkv_bias, **kw)
        self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps, **kw) if c.qk_norm else None
        self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps, **kw) if c.qk_norm else None
        self.attn = PagedAttention(layer_id, self.num_heads, self.num_kv_heads, c.head_dim, attention_backend)
        self.o_proj = RowParallelLinear(self.q_size, c.hidden_size, c.o_bias, tp, **kw)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, **kw)
        self.gate_up_proj = ColumnParallelLinear(c.hidden_size, 2 * self.intermediate_size, c.mlp_bias, **kw)
        self.down_proj = RowParallelLinear(self.intermediate_size, c.hidden_size, c.mlp_bias, tp, **kw)

    def forward(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: ForwardBatch,
                kv_pool: KVPool) -> torch.Tensor:
        """hidden ``[num_tokens, hidden_size]`` -> ``[num_tokens, hidden_size]`` (replicated on all ranks)."""
        x = self.input_layernorm(hidden)  # [num_tokens, hidden_size]
        qkv = self.qkv_proj(x)  # [num_tokens, q_size + 2 * kv_size] (local heads)
        attn_out = self._attention(qkv, cos, sin, batch, kv_pool)  # [num_tokens, q_size]
        hidden = _add_linear(self.o_proj, attn_out, hidden)  # hidden + o_proj(attn_out)
        x = self.post_attention_layernorm(hidden)
        return _add_linear(self.down_proj, self._gate_up_silu(x), hidden)

    def _attention(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: ForwardBatch,
                   kv_pool: KVPool) -> torch.Tensor:
        """RoPE, store the new K/V, attend: qkv ``[num_tokens, q + 2 kv]`` -> ``[num_tokens, q_size]``."""
        num_tokens, heads, kv_heads, head_dim = qkv.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        if native_decode.rope_store_kv(self, qkv, cos, sin, batch, kv_pool):
            q = qkv[:, :self.q_size].view(num_tokens, heads, head_dim)  # rows strided by the fused width
            return self.attn.attend(q, batch, kv_pool).reshape(num_tokens, self.q_size)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(num_tokens, heads, head_dim)  # [num_tokens, num_heads, head_dim] (local heads)
        k = k.view(num_tokens, kv_heads, head_dim)  # [num_tokens, num_kv_heads, head_dim]
        v = v.view(num_tokens, kv_heads, head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        attn_out = self.attn(q, k, v, batch, kv_pool)  # stores k/v at out_cache_loc, then attends
        return attn_out.reshape(num_tokens, self.q_size)

    def _gate_up_silu(self, x: torch.Tensor) -> torch.Tensor:
        """``silu(gate) * up`` ``[num_tokens, intermediate]`` of the fused gate/up projection of x."""
        act = native_decode.gate_up_silu(self.gate_up_proj, x)
        if act is not None:
            return act
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)  # each [num_tokens, inter]
        return F.silu(gate).mul_(up)

    def checkpoint_layout(self, prefix: str) -> CheckpointLayout:
        """HF names of this layer's tensors (``prefix`` = ``model.layers.<i>.``) and this rank's slices."""
        c, s, hd = self.config, self.shard, self.head_dim
        q, kv, inter = self.q_size, self.kv_size, self.intermediate_size
        q_full, kv_full, h = c.num_heads * hd, c.num_kv_heads * hd, c.hidden_size
        inter_start = self.tp.rank * inter
        # name -> (linear, first row, full output features, shard dim, shard start, shard length)
        column = {
            "self_attn.q_proj": (self.qkv_proj, 0, q_full, s.q_start * hd, q),
            "self_attn.k_proj": (self.qkv_proj, q, kv_full, s.kv_start * hd, kv),
            "self_attn.v_proj": (self.qkv_proj, q + kv, kv_full, s.kv_start * hd, kv),
            "mlp.gate_proj": (self.gate_up_proj, 0, c.intermediate_size, inter_start, inter),
            "mlp.up_proj": (self.gate_up_proj, inter, c.intermediate_size, inter_start, inter),
        }
        layout: CheckpointLayout = {}
        for name, (linear, row, full, start, length) in column.items():
            layout[f"{prefix}{name}.weight"] = _target(linear.weight, row, (full, h), 0, start, length)
            if linear.bias is not None:
                layout[f"{prefix}{name}.bias"] = _target(linear.bias, row, (full,), 0, start, length)
        row_parallel = {"self_attn.o_proj": (self.o_proj, q_full, s.q_start * hd, q),
                        "mlp.down_proj": (self.down_proj, c.intermediate_size, inter_start, inter)}
        for name, (linear, full_in, start, length) in row_parallel.items():
            layout[f"{prefix}{name}.weight"] = _target(linear.weight, 0, (h, full_in), 1, start, length)
            if linear.bias is not None:  # replicated: added once after the all-reduce
                layout[f"{prefix}{name}.bias"] = _target(linear.bias, 0, (h,))
        norms = {"input_layernorm": self.input_layernorm,
                 "post_attention_layernorm": self.post_attention_layernorm,
                 "self_attn.q_norm": self.q_norm, "self_attn.k_norm": self.k_norm}
        for name, norm in norms.items():
            if norm is not None:
                layout[f"{prefix}{name}.weight"] = _target(norm.weight, 0, tuple(norm.weight.shape))
        return layout


class LlamaForCausalLM(nn.Module):
    """embed -> decoder layers -> final norm -> lm_head, over a paged KV pool.

    ``tp`` (default: no parallelism) makes this rank's shard; every rank then runs ``forward`` on
    the same batch and gets the same full logits. ``num_kv_heads`` is the KV heads this rank's
    pool must hold.
    """

    def __init__(self, config: ModelConfig, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", attention_backend: str = "torch",
                 tp: TPGroup | None = None) -> None:
        super().__init__()
        tp = tp or TPGroup.single(device)
        check_tp_size(config, tp.size)
        self.config, self.tp = config, tp
        self.vocab_shard = VocabShard.for_rank(config.vocab_size, tp.rank, tp.size)
        kw = {"dtype": dtype, "device": device}
        self.embed_tokens = self.vocab_shard.empty_param(config.hidden_size, **kw)  # [vocab rows, hidden]
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config, i, attention_backend, tp, **kw) for i in range(config.num_layers))
        self.num_kv_heads = self.layers[0].num_kv_heads
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, **kw)
        self.lm_head = None if config.tie_word_embeddings else self.vocab_shard.empty_param(
            config.hidden_size, **kw)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling, device)
        self.native = native_decode.NativeDecode()  # the fused native decode layers (CPU, float32)
        native_decode.prepare(device, dtype)
        self.quantized_lm_head: nn.Module | None = None  # set by ``install``: GGUF blocks or int8
        # set by ``install``: a block-format or int8 embedding (embed_tokens is then None)
        self.quantized_embedding: nn.Module | None = None

    def install(self, loaded: LoadedModules) -> None:
        """Put a loader's modules in place of the float ones they replace (whose weights are dropped)."""
        for name, module in loaded.linears.items():
            parent, _, attr = name.rpartition(".")
            setattr(self.get_submodule(parent), attr, module)
        if loaded.embedding is not None:
            self.quantized_embedding = loaded.embedding
            self.embed_tokens = None
        if loaded.lm_head is not None:
            self.quantized_lm_head = loaded.lm_head
            self.lm_head = None

    @torch.no_grad()  # not inference_mode: callers mask the returned logits in place
    def forward(self, batch: ForwardBatch, kv_pool: KVPool) -> torch.Tensor:
        """Run the batch's new tokens, storing their K/V in ``kv_pool``.

        Returns float32 logits ``[len(batch.logits_indices), vocab_size]``.
        """
        if self.quantized_embedding is not None:  # GGUF: block_linear.BlockEmbedding; int8: Int8Embedding
            hidden = self.quantized_embedding(batch.input_ids).to(self.norm.weight.dtype)
        else:  # [num_tokens, hidden_size]
            hidden = vocab_parallel_embedding(batch.input_ids, self.embed_tokens, self.vocab_shard, self.tp)
        cos, sin = self.rotary.cos_sin(batch.positions, hidden.dtype)  # each [num_tokens, 1, head_dim]
        step = self.native.step(batch, hidden, cos, sin, kv_pool, self.tp.size)
        for layer in self.layers:
            fused = None if step is None else self.native.layer(layer, step, hidden, kv_pool)
            hidden = layer(hidden, cos, sin, batch, kv_pool) if fused is None else fused
        hidden = self.norm(hidden[batch.logits_indices])  # [num_logits, hidden_size]
        if self.quantized_lm_head is not None:  # Int8LMHead (all-gathers too) or GGUF's BlockLMHead
            return self.quantized_lm_head(hidden)  # [num_logits, vocab_size] float32
        lm_head = self.embed_tokens if self.lm_head is None else self.lm_head
        return parallel_lm_head(hidden, lm_head, self.config.vocab_size, self.tp)  # [num_logits, vocab_size]

    def checkpoint_layout(self) -> CheckpointLayout:
        """Every HF tensor name this model needs -> the ``TensorTarget`` this rank copies it into."""
        c, vs = self.config, self.vocab_shard
        vocab_shape = (c.vocab_size, c.hidden_size)
        layout: CheckpointLayout = {
            "model.embed_tokens.weight": _target(self.embed_tokens, 0, vocab_shape, 0, vs.start, vs.end - vs.start),
            "model.norm.weight": _target(self.norm.weight, 0, (c.hidden_size,)),
        }
        if self.lm_head is not None:
            layout["lm_head.weight"] = _target(self.lm_head, 0, vocab_shape, 0, vs.start, vs.end - vs.start)
        for i, layer in enumerate(self.layers):
            layout.update(layer.checkpoint_layout(f"model.layers.{i}."))
        return layout
