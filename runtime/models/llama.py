"""Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) over the paged KV pool.

The four architectures differ only by ``ModelConfig`` flags: ``qkv_bias``/``o_bias`` (Qwen2, or
``attention_bias``), ``qk_norm`` (Qwen3: per-head RMSNorm on q and k before RoPE),
``tie_word_embeddings``, and RoPE scaling. q/k/v are one fused matmul and gate/up another; the
loader fuses the checkpoint's separate tensors through ``checkpoint_layout()``.

Parameters are created uninitialised (``torch.empty``): the loader fills every one of them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from radixlm.runtime.attention import PagedAttention
from radixlm.runtime.forward_batch import ForwardBatch
from radixlm.runtime.kv_pool import KVPool
from radixlm.runtime.model_config import ModelConfig
from radixlm.runtime.rotary import RotaryEmbedding, apply_rotary
from torch import nn

# HF tensor name -> (parameter, first row, number of rows) it fills
CheckpointLayout = dict[str, tuple[nn.Parameter, int, int]]


def _empty(*shape: int, dtype: torch.dtype, device: torch.device | str) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


class Linear(nn.Module):
    """``y = x @ weight.T (+ bias)`` with weight ``[out_features, in_features]``."""

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        super().__init__()
        self.weight = _empty(out_features, in_features, dtype=dtype, device=device)
        self.bias = _empty(out_features, dtype=dtype, device=device) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class RMSNorm(nn.Module):
    """RMSNorm over the last dim, computed in float32 and cast back before the weight (as HF does)."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        self.eps = eps
        self.weight = _empty(dim, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class LlamaDecoderLayer(nn.Module):
    """Pre-norm attention block then pre-norm SwiGLU MLP block, each with a residual add."""

    def __init__(self, config: ModelConfig, layer_id: int, attention_backend: str,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        c = config
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.q_size, self.kv_size = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        self.intermediate_size = c.intermediate_size
        kw = {"dtype": dtype, "device": device}
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, **kw)
        self.qkv_proj = Linear(c.hidden_size, self.q_size + 2 * self.kv_size, c.qkv_bias, **kw)
        self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps, **kw) if c.qk_norm else None
        self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps, **kw) if c.qk_norm else None
        self.attn = PagedAttention(layer_id, c.num_heads, c.num_kv_heads, c.head_dim, attention_backend)
        self.o_proj = Linear(self.q_size, c.hidden_size, c.o_bias, **kw)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, **kw)
        self.gate_up_proj = Linear(c.hidden_size, 2 * c.intermediate_size, c.mlp_bias, **kw)
        self.down_proj = Linear(c.intermediate_size, c.hidden_size, c.mlp_bias, **kw)

    def forward(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                batch: ForwardBatch, kv_pool: KVPool) -> torch.Tensor:
        """hidden ``[num_tokens, hidden_size]`` -> ``[num_tokens, hidden_size]``."""
        num_tokens = hidden.shape[0]
        # attention block
        residual = hidden
        x = self.input_layernorm(hidden)  # [num_tokens, hidden_size]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)  # [num_tokens, num_heads, head_dim]
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)  # [num_tokens, num_kv_heads, head_dim]
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        attn_out = self.attn(q, k, v, batch, kv_pool)  # stores k/v at out_cache_loc, then attends
        hidden = residual + self.o_proj(attn_out.reshape(num_tokens, self.q_size))
        # MLP block
        residual = hidden
        x = self.post_attention_layernorm(hidden)
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)  # each [num_tokens, inter]
        return residual + self.down_proj(F.silu(gate) * up)

    def checkpoint_layout(self, prefix: str) -> CheckpointLayout:
        """HF names of this layer's tensors (``prefix`` = ``model.layers.<i>.``)."""
        q, kv, inter = self.q_size, self.kv_size, self.intermediate_size
        fused = {
            "self_attn.q_proj": (self.qkv_proj, 0, q),
            "self_attn.k_proj": (self.qkv_proj, q, kv),
            "self_attn.v_proj": (self.qkv_proj, q + kv, kv),
            "self_attn.o_proj": (self.o_proj, 0, self.o_proj.weight.shape[0]),
            "mlp.gate_proj": (self.gate_up_proj, 0, inter),
            "mlp.up_proj": (self.gate_up_proj, inter, inter),
            "mlp.down_proj": (self.down_proj, 0, self.down_proj.weight.shape[0]),
        }
        layout: CheckpointLayout = {}
        for name, (linear, start, rows) in fused.items():
            layout[f"{prefix}{name}.weight"] = (linear.weight, start, rows)
            if linear.bias is not None:
                layout[f"{prefix}{name}.bias"] = (linear.bias, start, rows)
        norms = {"input_layernorm": self.input_layernorm,
                 "post_attention_layernorm": self.post_attention_layernorm,
                 "self_attn.q_norm": self.q_norm, "self_attn.k_norm": self.k_norm}
        for name, norm in norms.items():
            if norm is not None:
                layout[f"{prefix}{name}.weight"] = (norm.weight, 0, norm.weight.shape[0])
        return layout


class LlamaForCausalLM(nn.Module):
    """embed -> decoder layers -> final norm -> lm_head, over a paged KV pool."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", attention_backend: str = "torch") -> None:
        super().__init__()
        self.config = config
        kw = {"dtype": dtype, "device": device}
        self.embed_tokens = _empty(config.vocab_size, config.hidden_size, **kw)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config, i, attention_backend, **kw) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, **kw)
        self.lm_head = None if config.tie_word_embeddings else _empty(
            config.vocab_size, config.hidden_size, **kw)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling, device)

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, kv_pool: KVPool) -> torch.Tensor:
        """Run the batch's new tokens, storing their K/V in ``kv_pool``.

        Returns float32 logits ``[len(batch.logits_indices), vocab_size]``.
        """
        hidden = F.embedding(batch.input_ids, self.embed_tokens)  # [num_tokens, hidden_size]
        cos, sin = self.rotary.cos_sin(batch.positions, hidden.dtype)  # each [num_tokens, 1, head_dim]
        for layer in self.layers:
            hidden = layer(hidden, cos, sin, batch, kv_pool)
        hidden = self.norm(hidden[batch.logits_indices])  # [num_logits, hidden_size]
        lm_head = self.embed_tokens if self.lm_head is None else self.lm_head
        return F.linear(hidden, lm_head).float()  # [num_logits, vocab_size]

    def checkpoint_layout(self) -> CheckpointLayout:
        """Every HF tensor name this model needs -> (parameter, first row, rows) it is copied into."""
        layout: CheckpointLayout = {
            "model.embed_tokens.weight": (self.embed_tokens, 0, self.config.vocab_size),
            "model.norm.weight": (self.norm.weight, 0, self.config.hidden_size),
        }
        if self.lm_head is not None:
            layout["lm_head.weight"] = (self.lm_head, 0, self.config.vocab_size)
        for i, layer in enumerate(self.layers):
            layout.update(layer.checkpoint_layout(f"model.layers.{i}."))
        return layout
