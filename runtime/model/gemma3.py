"""Gemma 3 text decoder (``Gemma3ForCausalLM``; the language model of ``Gemma3ForConditionalGeneration``).

What differs from the Llama family (``llama.py``, whose fused q/k/v and gate/up projections, tensor
parallel shards, q/k norms, RoPE and paged attention this reuses):

- embeddings scaled by ``sqrt(hidden_size)``, rounded to the embedding dtype first (as transformers);
- RMSNorm multiplies by ``1 + weight``, in float32 before casting back (``GemmaRMSNorm``);
- four norms per layer: the attention and MLP outputs are normed (post-attention,
  post-feedforward) before their residual adds, and the MLP input by pre-feedforward;
- per-head q/k norms, attention scale ``query_pre_attn_scalar ** -0.5``;
- GeGLU MLP: ``gelu_tanh(gate) * up``;
- interleaved layers: ``sliding_attention`` layers see only the last ``sliding_window`` keys and
  use the local RoPE base; ``full_attention`` layers see everything and use the global base
  (with its rope scaling);
- optional final logit soft cap ``cap * tanh(logits / cap)``.

Checkpoint names are transformers' (``model.layers.<i>.pre_feedforward_layernorm.weight``, ...);
a multimodal checkpoint's language-model tensors are renamed to them by ``text_tensor_name``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from radixlm.runtime.model.attention import PagedAttention, RotaryEmbedding
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool
from radixlm.runtime.model.llama import CheckpointLayout, LlamaDecoderLayer, LlamaForCausalLM, _target
from radixlm.runtime.model.model_config import SLIDING, ModelConfig
from radixlm.runtime.model.parallel.distributed import TPGroup
from radixlm.runtime.model.parallel.layers import empty_param, parallel_lm_head, vocab_parallel_embedding
from torch import nn

__all__ = ["Gemma3ForCausalLM", "GemmaRMSNorm", "text_tensor_name"]

# a multimodal checkpoint's prefixes of the language model (transformers 4.x and 5.x layouts)
_TEXT_PREFIXES = ("language_model.model.", "model.language_model.")
_OTHER_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


def text_tensor_name(name: str) -> str | None:
    """A ``Gemma3ForConditionalGeneration`` tensor's name in ``Gemma3ForCausalLM``, or None (vision)."""
    for prefix in _TEXT_PREFIXES:
        if name.startswith(prefix):
            return "model." + name[len(prefix):]
    if name.startswith(_OTHER_PREFIXES):
        return None
    if name == "language_model.lm_head.weight":
        return "lm_head.weight"
    return name


class GemmaRMSNorm(nn.Module):
    """RMSNorm over the last dim scaled by ``1 + weight``, all in float32, cast back at the end."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__()
        self.eps = eps
        self.weight = empty_param(dim, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * (1.0 + self.weight.float())).to(x.dtype)


class Gemma3DecoderLayer(LlamaDecoderLayer):
    """Sandwich-normed attention block then sandwich-normed GeGLU block, each with a residual add."""

    def __init__(self, config: ModelConfig, layer_id: int, attention_backend: str, tp: TPGroup,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        super().__init__(config, layer_id, attention_backend, tp, dtype, device)
        c = config
        norm = lambda dim: GemmaRMSNorm(dim, c.rms_norm_eps, dtype, device)  # noqa: E731
        self.input_layernorm, self.post_attention_layernorm = norm(c.hidden_size), norm(c.hidden_size)
        self.pre_feedforward_layernorm, self.post_feedforward_layernorm = norm(c.hidden_size), norm(c.hidden_size)
        self.q_norm, self.k_norm = norm(c.head_dim), norm(c.head_dim)
        self.is_sliding = c.layer_types[layer_id] == SLIDING
        self.attn = PagedAttention(layer_id, self.num_heads, self.num_kv_heads, c.head_dim, attention_backend,
                                   sm_scale=c.attention_scale,
                                   sliding_window=c.sliding_window if self.is_sliding else None)

    def forward(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: ForwardBatch,
                kv_pool: KVPool) -> torch.Tensor:
        """hidden ``[num_tokens, hidden_size]`` -> ``[num_tokens, hidden_size]``; cos/sin of this
        layer's RoPE (local or global). No fused native layer: Gemma's forward never asks for one."""
        x = self.input_layernorm(hidden)
        attn_out = self._attention(self.qkv_proj(x), cos, sin, batch, kv_pool)  # [num_tokens, q_size]
        hidden = hidden + self.post_attention_layernorm(self.o_proj(attn_out))
        x = self.pre_feedforward_layernorm(hidden)
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)  # each [num_tokens, inter]
        mlp_out = self.down_proj(F.gelu(gate, approximate="tanh").mul_(up))
        return hidden + self.post_feedforward_layernorm(mlp_out)

    def checkpoint_layout(self, prefix: str) -> CheckpointLayout:
        layout = super().checkpoint_layout(prefix)
        for name in ("pre_feedforward_layernorm", "post_feedforward_layernorm"):
            weight = getattr(self, name).weight
            layout[f"{prefix}{name}.weight"] = _target(weight, 0, tuple(weight.shape))
        return layout


class Gemma3ForCausalLM(LlamaForCausalLM):
    """scaled embed -> interleaved sliding / global layers -> final norm -> (tied) lm_head -> soft cap."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", attention_backend: str = "torch",
                 tp: TPGroup | None = None) -> None:
        super().__init__(config, dtype, device, attention_backend, tp)
        kw = {"dtype": dtype, "device": device}
        self.layers = nn.ModuleList(
            Gemma3DecoderLayer(config, i, attention_backend, self.tp, **kw) for i in range(config.num_layers))
        self.norm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps, **kw)
        self.local_rotary = RotaryEmbedding(config.head_dim, config.local_rope_theta, None, device)
        # transformers rounds sqrt(hidden) to the embedding dtype before scaling
        self.embed_scale = torch.tensor(config.hidden_size**0.5, dtype=dtype, device=device)

    @torch.no_grad()
    def forward(self, batch: ForwardBatch, kv_pool: KVPool) -> torch.Tensor:
        """Run the batch's new tokens, storing their K/V in ``kv_pool``.

        Returns float32 logits ``[len(batch.logits_indices), vocab_size]``.
        """
        quantized = getattr(self, "quantized_embedding", None)  # a GGUF file's block-format embedding
        if quantized is not None:
            hidden = quantized(batch.input_ids).to(self.embed_scale.dtype)
        else:
            hidden = vocab_parallel_embedding(batch.input_ids, self.embed_tokens, self.vocab_shard, self.tp)
        hidden = hidden * self.embed_scale  # [num_tokens, hidden_size]
        rope = {False: self.rotary.cos_sin(batch.positions, hidden.dtype),  # each [num_tokens, 1, head_dim]
                True: self.local_rotary.cos_sin(batch.positions, hidden.dtype)}
        for layer in self.layers:
            cos, sin = rope[layer.is_sliding]
            hidden = layer(hidden, cos, sin, batch, kv_pool)
        hidden = self.norm(hidden[batch.logits_indices])  # [num_logits, hidden_size]
        if self.quantized_lm_head is not None:
            logits = self.quantized_lm_head(hidden)
        else:
            lm_head = self.embed_tokens if self.lm_head is None else self.lm_head
            logits = parallel_lm_head(hidden, lm_head, self.config.vocab_size, self.tp)  # [num_logits, vocab]
        cap = self.config.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap).mul_(cap)
        return logits
