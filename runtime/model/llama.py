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

On the CPU in float32 (weights float32, int8, or GGUF block weights: ``block_linear.native_blocks``), a
decode step of at most ``NATIVE_MAX_ROWS`` requests runs each layer as one call into ``kernels/cpu_native`` (``decode_layer``: norms, q/k/v GEMV, RoPE + KV store, paged
attention, o GEMV + residual, gate/up GEMV + SiLU * up, down GEMV + residual); other steps use the
torch ops, with the native norms and RoPE + KV store (and the native GEMV up to ``NATIVE_MAX_ROWS``
rows). Both agree to float32 rounding (``tests/kernels/test_native_kernels.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from radixlm.kernels import cpu_native
from radixlm.runtime.model.attention import PagedAttention
from radixlm.runtime.model.block_linear import BlockLinear, native_blocks, native_isa
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool
from radixlm.runtime.model.model_config import ModelConfig
from radixlm.runtime.model.parallel.distributed import TPGroup
from radixlm.runtime.model.parallel.layers import (
    NATIVE_MAX_ROWS,
    AttentionShard,
    ColumnParallelLinear,
    Linear,
    RowParallelLinear,
    VocabShard,
    check_tp_size,
    empty_param,
    parallel_lm_head,
    vocab_parallel_embedding,
)
from radixlm.runtime.model.quantization import native_operands
from radixlm.runtime.model.rotary import RotaryEmbedding, apply_rotary
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
        if x.dim() == 2 and cpu_native.usable(x, self.weight):
            return cpu_native.rmsnorm(x, self.weight, self.eps)
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
                kv_pool: KVPool, native_step: cpu_native.StepArgs | None = None) -> torch.Tensor:
        """hidden ``[num_tokens, hidden_size]`` -> ``[num_tokens, hidden_size]`` (replicated on all ranks).

        ``native_step`` (a decode step the native kernels take, from the model's forward): run the
        fused native layer, which updates ``hidden`` in place and returns it.
        """
        if native_step is not None and self._native_params() is not None:
            layer_id = self.attn.layer_id
            return cpu_native.decode_layer(self._native, native_step, hidden, kv_pool.k_buffers[layer_id],
                                           kv_pool.v_buffers[layer_id])
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
        k_pool, v_pool = kv_pool.k_buffers[self.attn.layer_id], kv_pool.v_buffers[self.attn.layer_id]
        if (self.q_norm is None and self.attn.native_ok
                and cpu_native.usable(qkv, cos, sin, k_pool, v_pool) and cpu_native.usable_indices(batch.out_cache_loc)):
            cpu_native.rope_store_kv(qkv, heads, kv_heads, head_dim, cos, sin, batch.out_cache_loc, k_pool, v_pool)
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

    def _native_params(self) -> cpu_native.LayerParams | None:
        """This layer's parameters for ``cpu_native.decode_layer``, or None when it cannot run them:
        built on first use and again whenever a projection was replaced (e.g. quantized)."""
        m = self._modules  # plain dict lookups: this runs once per layer per decode step
        key = (m["qkv_proj"], m["o_proj"], m["gate_up_proj"], m["down_proj"])
        if self.__dict__.get("_native_key") != key:
            self._native_key, self._native = key, self._build_native_params()
        return self._native

    def _build_native_params(self) -> cpu_native.LayerParams | None:
        projections = (self.qkv_proj, self.o_proj, self.gate_up_proj, self.down_proj)
        operands = [native_operands(p) for p in projections]  # (float32 or int8 weight, int8 scales or None)
        blocks = [native_blocks(p) for p in projections]  # GGUF block weights (block_linear), or None
        norms = [n for n in (self.input_layernorm, self.post_attention_layernorm, self.q_norm, self.k_norm) if n]
        tensors = [n.weight for n in norms] + [b for p in projections if (b := getattr(p, "bias", None)) is not None]
        if not (self.tp.size == 1 and self.attn.native_ok and cpu_native.available()
                and all(o is not None or b is not None for o, b in zip(operands, blocks))
                and self.gate_up_proj.bias is None
                and cpu_native.usable(*tensors)
                and cpu_native.decode_attention_ok(self.num_heads, self.num_kv_heads, self.head_dim)):
            return None
        ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        (w_qkv, s_qkv), (w_o, s_o), (w_gate_up, s_gate_up), (w_down, s_down) = [o or (None, None) for o in operands]
        params = cpu_native.LayerParams(
            ln1=ptr(self.input_layernorm.weight), ln2=ptr(self.post_attention_layernorm.weight),
            w_qkv=ptr(w_qkv), b_qkv=ptr(self.qkv_proj.bias), w_o=ptr(w_o),
            b_o=ptr(self.o_proj.bias), w_gate_up=ptr(w_gate_up), w_down=ptr(w_down),
            b_down=ptr(self.down_proj.bias), q_norm=ptr(self.q_norm and self.q_norm.weight),
            k_norm=ptr(self.k_norm and self.k_norm.weight), s_qkv=ptr(s_qkv), s_o=ptr(s_o),
            s_gate_up=ptr(s_gate_up), s_down=ptr(s_down), eps=self.input_layernorm.eps, scale=self.attn.sm_scale,
            hidden=self.config.hidden_size, H=self.num_heads, Hkv=self.num_kv_heads, D=self.head_dim,
            inter=self.intermediate_size)
        if any(b is not None for b in blocks):
            params.isa = native_isa()
            for i, b in enumerate(blocks):
                if b is not None:
                    params.blocks[i] = b
        return params

    def _gate_up_silu(self, x: torch.Tensor) -> torch.Tensor:
        """``silu(gate) * up`` ``[num_tokens, intermediate]`` of the fused gate/up projection of x."""
        proj = self.gate_up_proj
        if (isinstance(proj, Linear) and proj.bias is None and x.dim() == 2 and x.shape[0] <= NATIVE_MAX_ROWS
                and cpu_native.usable(x, proj.weight)):
            return cpu_native.gate_up_silu(x, proj.weight)
        if isinstance(proj, BlockLinear) and (act := proj.gate_up_silu(x)) is not None:
            return act
        gate, up = proj(x).split(self.intermediate_size, dim=-1)  # each [num_tokens, inter]
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
        if torch.device(device).type == "cpu" and dtype == torch.float32:
            cpu_native.available()  # build / load the native decode kernels now, not in the first step
        self.quantized_lm_head: nn.Module | None = None  # set by quantization.quantize_model or the GGUF loader
        # set by the GGUF loader (a block-format embedding) or int8 quantization (embed_tokens is then None)
        self.quantized_embedding: nn.Module | None = None

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
        step = self._native_step(batch, hidden, cos, sin, kv_pool)
        for layer in self.layers:
            hidden = layer(hidden, cos, sin, batch, kv_pool, step)
        hidden = self.norm(hidden[batch.logits_indices])  # [num_logits, hidden_size]
        if self.quantized_lm_head is not None:  # Int8LMHead (all-gathers too) or GGUF's BlockLMHead
            return self.quantized_lm_head(hidden)  # [num_logits, vocab_size] float32
        lm_head = self.embed_tokens if self.lm_head is None else self.lm_head
        return parallel_lm_head(hidden, lm_head, self.config.vocab_size, self.tp)  # [num_logits, vocab_size]

    def _native_step(self, batch: ForwardBatch, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     kv_pool: KVPool) -> cpu_native.StepArgs | None:
        """The step's arguments for the layers' fused native decode path, or None (torch path).

        Checked once per step: the layers then only check their own parameters.
        """
        if not (batch.is_decode and hidden.shape[0] <= NATIVE_MAX_ROWS and self.tp.size == 1
                and cpu_native.usable(hidden, cos, sin, kv_pool.k_buffers[0], kv_pool.v_buffers[0])
                and cpu_native.usable_indices(batch.out_cache_loc, batch.kv_indptr, batch.kv_indices)):
            return None
        return cpu_native.decode_step(cos, sin, batch.out_cache_loc, batch.kv_indptr, batch.kv_indices,
                                      batch.shared_prefix_len)

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
