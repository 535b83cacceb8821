"""The native CPU fast path of the Llama-family forward: the one module that asks ``kernels/cpu_native``.

On the CPU in float32 (weights float32, int8, or GGUF block weights; the KV pool float32 or float16), a
decode step of at most
``NATIVE_MAX_ROWS`` requests runs each decoder layer as one call into ``cpu_native.decode_layer``
(norms, q/k/v GEMV, RoPE + KV store, paged attention, o GEMV + residual, gate/up GEMV + SiLU * up,
down GEMV + residual). The model asks once per step (``NativeDecode.step``) and once per layer
(``NativeDecode.layer``); other steps use the torch ops, with the native norm (``rmsnorm``), RoPE + KV
store (``rope_store_kv``) and gate/up + SiLU (``gate_up_silu``) wherever the kernels take the operands.
Every function answers None (or False) where the kernels cannot run, and the caller runs torch. Both
paths agree to float32 rounding (``tests/kernels/test_native_kernels.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from radixlm.kernels import cpu_native
from radixlm.runtime.model.block_linear import BlockLinear, native_blocks, native_isa
from radixlm.runtime.model.forward_batch import ForwardBatch
from radixlm.runtime.model.kv_pool import KVPool
from radixlm.runtime.model.parallel.layers import NATIVE_MAX_ROWS, Linear
from radixlm.runtime.model.quantization import Int8Linear
from torch import nn

if TYPE_CHECKING:  # llama imports this module
    from radixlm.runtime.model.llama import LlamaDecoderLayer


def prepare(device: torch.device | str, dtype: torch.dtype) -> None:
    """Build (or load) the native kernels now, for a model that can use them, not in its first step."""
    if torch.device(device).type == "cpu" and dtype == torch.float32:
        cpu_native.available()


def kv_half_ok(device: torch.device | str, dtype: torch.dtype, backend: str, num_heads: int, num_kv_heads: int,
               head_dim: int) -> bool:
    """Whether the native kernels run this model's decode attention from a float16 KV pool (float32
    compute on the CPU, the torch backend, kernels built, head shapes they take): ``--kv-cache-dtype
    auto``'s 16-bit case on the CPU."""
    return (torch.device(device).type == "cpu" and dtype == torch.float32 and backend == "torch"
            and cpu_native.available() and cpu_native.decode_attention_ok(num_heads, num_kv_heads, head_dim))


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor | None:
    """RMSNorm of ``x [n, dim]`` by the native kernel, or None where it does not take the operands."""
    if x.dim() == 2 and cpu_native.usable(x, weight):
        return cpu_native.rmsnorm(x, weight, eps)
    return None


def rope_store_kv(layer: LlamaDecoderLayer, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  batch: ForwardBatch, kv_pool: KVPool) -> bool:
    """Rotate the q and k parts of ``qkv`` in place and store k/v at ``batch.out_cache_loc``, natively;
    False (nothing done) for a layer with q/k norms or operands the kernel does not take."""
    k_pool, v_pool = kv_pool.k_buffers[layer.attn.layer_id], kv_pool.v_buffers[layer.attn.layer_id]
    if not (layer.q_norm is None and layer.attn.native_ok and cpu_native.usable(qkv, cos, sin)
            and cpu_native.usable_kv(k_pool, v_pool) and cpu_native.usable_indices(batch.out_cache_loc)):
        return False
    cpu_native.rope_store_kv(qkv, layer.num_heads, layer.num_kv_heads, layer.head_dim, cos, sin,
                             batch.out_cache_loc, k_pool, v_pool)
    return True


def gate_up_silu(proj: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """``silu(gate) * up`` ``[n, inter]`` of a fused gate/up projection of ``x [n, hidden]`` in one native
    call (a float32 ``Linear`` up to ``NATIVE_MAX_ROWS`` rows, or GGUF blocks), else None."""
    if (isinstance(proj, Linear) and proj.bias is None and x.dim() == 2 and x.shape[0] <= NATIVE_MAX_ROWS
            and cpu_native.usable(x, proj.weight)):
        return cpu_native.gate_up_silu(x, proj.weight)
    if isinstance(proj, BlockLinear):
        return proj.gate_up_silu(x)
    return None


def native_operands(proj: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(weight, its int8 scales or None) of a float32 ``Linear`` or a torch-backend ``Int8Linear`` the
    fused native decode layer can take (``cpu_native.LayerParams``), else None."""
    if isinstance(proj, Linear):
        return (proj.weight, None) if cpu_native.usable(proj.weight) else None
    if (isinstance(proj, Int8Linear) and proj.backend == "torch"
            and cpu_native.usable_int8(proj.qweight, proj.scale)):
        return proj.qweight, proj.scale
    return None


class NativeDecode:
    """The fused native decode layers of one model: the per-step arguments and each layer's parameters
    (built on a layer's first use, and again whenever a projection was replaced, e.g. quantized)."""

    def __init__(self) -> None:
        # layer id -> (the projections the parameters were built from, the parameters or None)
        self._params: dict[int, tuple[tuple[nn.Module, ...], cpu_native.LayerParams | None]] = {}

    def step(self, batch: ForwardBatch, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             kv_pool: KVPool, tp_size: int) -> cpu_native.StepArgs | None:
        """The step's arguments for the fused layers, or None (a prefill, too many rows, tensor
        parallelism, or operands the kernels do not take: the torch path). Checked once per step."""
        if not (batch.is_decode and hidden.shape[0] <= NATIVE_MAX_ROWS and tp_size == 1
                and cpu_native.usable(hidden, cos, sin)
                and cpu_native.usable_kv(kv_pool.k_buffers[0], kv_pool.v_buffers[0])
                and cpu_native.usable_indices(batch.out_cache_loc, batch.kv_indptr, batch.kv_indices)):
            return None
        return cpu_native.decode_step(cos, sin, batch.out_cache_loc, batch.kv_indptr, batch.kv_indices,
                                      batch.shared_prefix_len, kv_dtype=kv_pool.dtype)

    def layer(self, layer: LlamaDecoderLayer, step: cpu_native.StepArgs, hidden: torch.Tensor,
              kv_pool: KVPool) -> torch.Tensor | None:
        """Run ``layer`` as one fused call (updating ``hidden`` in place and returning it), or None where
        its parameters cannot run natively (the caller runs the torch layer)."""
        params = self.params(layer)
        if params is None:
            return None
        layer_id = layer.attn.layer_id
        return cpu_native.decode_layer(params, step, hidden, kv_pool.k_buffers[layer_id], kv_pool.v_buffers[layer_id])

    def params(self, layer: LlamaDecoderLayer) -> cpu_native.LayerParams | None:
        """``layer``'s parameters for ``cpu_native.decode_layer``, or None when it cannot run them."""
        m = layer._modules  # plain dict lookups: this runs once per layer per decode step
        key = (m["qkv_proj"], m["o_proj"], m["gate_up_proj"], m["down_proj"])
        cached = self._params.get(layer.attn.layer_id)
        if cached is None or cached[0] != key:
            cached = self._params[layer.attn.layer_id] = (key, _layer_params(layer))
        return cached[1]


def _layer_params(layer: LlamaDecoderLayer) -> cpu_native.LayerParams | None:
    projections = (layer.qkv_proj, layer.o_proj, layer.gate_up_proj, layer.down_proj)
    operands = [native_operands(p) for p in projections]  # (float32 or int8 weight, int8 scales or None)
    blocks = [native_blocks(p) for p in projections]  # GGUF block weights (block_linear), or None
    norms = [n for n in (layer.input_layernorm, layer.post_attention_layernorm, layer.q_norm, layer.k_norm) if n]
    tensors = [n.weight for n in norms] + [b for p in projections if (b := getattr(p, "bias", None)) is not None]
    if not (layer.tp.size == 1 and layer.attn.native_ok and cpu_native.available()
            and all(o is not None or b is not None for o, b in zip(operands, blocks))
            and layer.gate_up_proj.bias is None
            and cpu_native.usable(*tensors)
            and cpu_native.decode_attention_ok(layer.num_heads, layer.num_kv_heads, layer.head_dim)):
        return None
    ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
    (w_qkv, s_qkv), (w_o, s_o), (w_gate_up, s_gate_up), (w_down, s_down) = [o or (None, None) for o in operands]
    params = cpu_native.LayerParams(
        ln1=ptr(layer.input_layernorm.weight), ln2=ptr(layer.post_attention_layernorm.weight),
        w_qkv=ptr(w_qkv), b_qkv=ptr(layer.qkv_proj.bias), w_o=ptr(w_o),
        b_o=ptr(layer.o_proj.bias), w_gate_up=ptr(w_gate_up), w_down=ptr(w_down),
        b_down=ptr(layer.down_proj.bias), q_norm=ptr(layer.q_norm and layer.q_norm.weight),
        k_norm=ptr(layer.k_norm and layer.k_norm.weight), s_qkv=ptr(s_qkv), s_o=ptr(s_o),
        s_gate_up=ptr(s_gate_up), s_down=ptr(s_down), eps=layer.input_layernorm.eps, scale=layer.attn.sm_scale,
        hidden=layer.config.hidden_size, H=layer.num_heads, Hkv=layer.num_kv_heads, D=layer.head_dim,
        inter=layer.intermediate_size)
    if any(b is not None for b in blocks):
        params.isa = native_isa()
        for i, b in enumerate(blocks):
            if b is not None:
                params.blocks[i] = b
    return params
