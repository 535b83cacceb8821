"""GGUF weights kept in their own block format inside the model: linears, the embedding, the LM head.

The GGUF loader (``gguf_loader``) puts these in place of the float modules for every 2-D weight
that is not float32 in the file, so no float copy of a quantized weight is ever made. Each computes
with ``kernels.gguf_blocks`` (``block_linear``: float32 activations in, float32 out; ``block_rows``:
the embedding lookup). A fused projection (q/k/v, gate/up) whose parts have different block types
(a Q4_K_M file mixes Q5_0, Q6_K and Q8_0) keeps one ``BlockWeight`` per run of equal types (the
loader joins the others) and concatenates the outputs. At a decode step the fused native layer
(``cpu_native.decode_layer``) takes the parts as they are (``native_blocks``), norms, RoPE and attention
included, so the layer costs one call instead of a dozen torch ops.
"""

from __future__ import annotations

import torch
from radixlm.kernels import cpu_native, gguf_blocks_native
from radixlm.kernels.gguf_blocks import BlockWeight, block_linear, block_rows
from torch import nn


class BlockLinear(nn.Module):
    """``y = x @ W.T (+ bias)`` with ``W`` the row-wise stack of ``parts`` (GGUF block weights).

    ``x [..., in]`` in any float dtype -> ``y [..., out]`` in x's dtype (computed in float32).
    """

    def __init__(self, parts: list[BlockWeight], bias: torch.Tensor | None = None) -> None:
        super().__init__()
        if not parts or len({p.shape[1] for p in parts}) != 1:
            raise ValueError(f"parts must share in_features, got shapes {[p.shape for p in parts]}")
        self.parts = parts
        self.in_features = parts[0].shape[1]
        self.out_features = sum(p.shape[0] for p in parts)
        self.register_buffer("bias", None if bias is None else bias.detach().float().contiguous())

    def forward(self, x: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
        """``y = x @ W.T (+ bias)``, or ``add + y`` (a residual ``[..., out]``, fused into the native call)."""
        x2 = x.reshape(-1, self.in_features).float().contiguous()  # [n, in]
        blocks = self.native()
        if blocks is not None and x2.shape[0] > 0:
            add2 = None if add is None else add.reshape(-1, self.out_features).float().contiguous()
            y = cpu_native.block_linear(blocks, x2, native_isa(), self.bias, add2)  # [n, out]
            return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        if len(self.parts) == 1:
            y = block_linear(x2, self.parts[0], self.bias)  # [n, out]
        else:
            y = torch.cat([block_linear(x2, p) for p in self.parts], dim=-1)
            y = y if self.bias is None else y.add_(self.bias)
        y = y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        return y if add is None else add + y

    def native(self) -> cpu_native.BlockProj | None:
        """``native_blocks(self)`` (resolved once: the native kernels load lazily) where the native kernels
        run now (not within ``cpu_native.torch_only()``), else None."""
        blocks = self.__dict__.get("_blocks", False)
        if blocks is False:
            blocks = self._blocks = native_blocks(self)
        return blocks if cpu_native.available() else None

    def gate_up_silu(self, x: torch.Tensor) -> torch.Tensor | None:
        """``silu(gate) * up`` ``[n, out / 2]`` of a fused gate/up on ``x [n, in]`` in one native call, or
        None where the native kernels do not run (the caller splits ``self(x)`` itself)."""
        blocks = self.native()
        if blocks is None or self.bias is not None or x.dim() != 2 or x.shape[0] == 0:
            return None
        return cpu_native.block_gate_up_silu(blocks, x.float().contiguous(), native_isa())

    def extra_repr(self) -> str:
        types = "+".join(p.type_name for p in self.parts)
        return f"in_features={self.in_features}, out_features={self.out_features}, types={types}, " \
               f"bias={self.bias is not None}"


def native_blocks(proj: nn.Module) -> cpu_native.BlockProj | None:
    """A ``BlockLinear``'s parts as the fused native decode layer takes them (``cpu_native.LayerParams``'s
    ``blocks``), or None: another module, more than ``cpu_native.BLOCK_PARTS`` parts, or no native kernels."""
    if not isinstance(proj, BlockLinear) or len(proj.parts) > cpu_native.BLOCK_PARTS \
            or not gguf_blocks_native.available():
        return None
    blocks = cpu_native.BlockProj(parts=len(proj.parts))
    for i, part in enumerate(proj.parts):
        blocks.w[i], blocks.qtype[i], blocks.rows[i] = part.data.data_ptr(), part.qtype, part.shape[0]
    return blocks


def native_isa() -> int:
    """The block kernels' instruction set as ``LayerParams.isa`` takes it (``gguf_blocks_native.isa()``)."""
    return gguf_blocks_native.ISAS[gguf_blocks_native.isa()]


class BlockEmbedding(nn.Module):
    """The token embedding as a block weight: ids ``[n]`` -> float32 ``[n, hidden]``."""

    def __init__(self, weight: BlockWeight) -> None:
        super().__init__()
        self.weight = weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return block_rows(self.weight, ids)

    def extra_repr(self) -> str:
        return f"num_embeddings={self.weight.shape[0]}, dim={self.weight.shape[1]}, type={self.weight.type_name}"


class BlockLMHead(nn.Module):
    """The LM head as a block weight (the embedding's when tied): hidden ``[n, hidden]`` -> float32
    logits ``[n, vocab]``."""

    def __init__(self, weight: BlockWeight) -> None:
        super().__init__()
        self.weight = weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return block_linear(hidden.float().contiguous(), self.weight)

    def extra_repr(self) -> str:
        return f"hidden={self.weight.shape[1]}, vocab={self.weight.shape[0]}, type={self.weight.type_name}"
