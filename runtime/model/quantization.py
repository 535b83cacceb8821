"""Int8 weight-only quantization (``--quantization int8``), applied layer by layer as the checkpoint
loads (``QuantizeAsLoaded``) or to a loaded model (``quantize_model``).

Every decoder linear (fused q/k/v, o_proj, fused gate/up, down_proj) and the LM head (tied or not)
becomes an int8 weight ``q [out, in]`` with one float32 scale per output channel, symmetric:
``scale[o] = max_i |W[o, i]| / 127`` and ``q = round(W / scale)`` in ``[-127, 127]``, so
``|W - q * scale| <= scale / 2`` elementwise. A tied embedding shares the head's int8 rows (the
lookup dequantizes the rows it reads: ``Int8Embedding``); an untied one is quantized the same way,
so no float copy of the vocabulary remains. Norms and biases stay float.
Under tensor parallelism a row-parallel shard (o_proj, down_proj: a slice of the input features)
takes its rows' maximum over the *whole* row (a max all-reduce), so every rank quantizes exactly
as the unsharded model would; the sum over ranks and the bias after it are unchanged.

The matmul dequantizes inside: ``y = (x @ q.T) * scale (+ bias)`` (the scale factors out of the
sum over the input features). ``int8_linear`` picks the implementation, the fastest of the exact
ones per case (``benchmarks/run.py --suite quant`` times each per shape, dtype and batch size):

* ``backend="triton"`` (CUDA, or the CPU under ``TRITON_INTERPRET=1``): ``kernels/int8_matmul.py``.
* the native AVX2 int8 GEMV (``kernels/cpu_native.linear_int8``, ``csrc/gemv_int8.c``: each int8
  weight row read once for all rows, converted to float32 in registers, float32 sums) for float32
  CPU activations of at most ``NATIVE_MAX_ROWS`` rows; a decode step's layers then run whole in
  ``cpu_native.decode_layer`` with their int8 weights (``native_decode.native_operands``), as float32 layers do.
* torch, ``torch.ops.aten._weight_int8pack_mm`` (float32 accumulation, the scale in the activations'
  dtype) for bfloat16 activations of at most ``INT8PACK_MAX_ROWS`` rows (vectorized for AVX2 and
  AVX-512), and for one float32 row without the native kernels (x86 runs float32 through a scalar
  loop: still a little faster than converting the weights at batch 1); K a multiple of 16.
* torch, otherwise: ``F.linear(x, q.float()) * scale`` in float32 (the weights converted per call).

Int8 quantization during loading: each decoder layer, and the embedding with the head, is
quantized as soon as the loader has copied all of its tensors, and its float weights are freed
before the next ones are read. Loading a float32 checkpoint with ``--quantization int8`` then
peaks near the int8 model plus one float layer (or the float embedding), not at the float32 model
plus its int8 copy. ``quantization.quantize_model`` still runs afterwards and quantizes whatever is
left, so the result is the same as quantizing after loading.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F
from radixlm.kernels import cpu_native
from radixlm.runtime.model.parallel.distributed import TPGroup
from radixlm.runtime.model.parallel.layers import NATIVE_MAX_ROWS, Linear, LoadedModules, RowParallelLinear
from radixlm.runtime.server_args import QUANTIZATIONS

if TYPE_CHECKING:  # llama imports this module (through native_decode)
    from radixlm.runtime.model.llama import CheckpointLayout, LlamaForCausalLM
from radixlm.runtime.model.memory_placement import release_free_memory
from torch import nn

INT8_MAX = 127
QUANTIZE_ROWS = 4096  # rows quantized at a time: bounds the float32 temporary of a large LM head
DEQUANT_ROWS = 2048  # weight rows dequantized at a time by the float32 fallback matmul
# Most rows for which _weight_int8pack_mm beats converting the weights per call (2-core AVX2, the
# `small` shapes: bfloat16 wins up to ~32 rows, ties at 48, loses at 64; float32 wins at 1 row only)
INT8PACK_MAX_ROWS = {torch.bfloat16: 32, torch.float32: 1}


def check_quantization(method: object) -> str | None:
    """``method`` if it is None or one of ``server_args.QUANTIZATIONS``; ``ValueError`` naming ``quantization``."""
    if method is not None and method not in QUANTIZATIONS:
        raise ValueError(f"quantization must be {' or '.join(QUANTIZATIONS)} (weight-only) or None for the "
                         f"float weights; got {method!r}")
    return method


def row_absmax(weight: torch.Tensor, tp: TPGroup | None = None) -> torch.Tensor:
    """float32 ``[out]``: max |w| of each row; with ``tp`` (a row-parallel shard) over every rank's columns."""
    amax = torch.cat([w.abs().amax(dim=1).float() for w in weight.split(QUANTIZE_ROWS)])
    if tp is not None and tp.size > 1:
        dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=tp.group)
    return amax


def quantize_int8(weight: torch.Tensor, absmax: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """float ``[out, in]`` -> (int8 ``[out, in]``, float32 scale ``[out]``), per output channel, symmetric.

    ``absmax`` (default: each row's own) sets the scales; an all-zero row gets scale 1 and q = 0.
    """
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {tuple(weight.shape)}")
    amax = row_absmax(weight) if absmax is None else absmax
    scale = torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))  # [out]
    q = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
    for rows, w in zip(range(0, weight.shape[0], QUANTIZE_ROWS), weight.split(QUANTIZE_ROWS)):
        s = scale[rows:rows + w.shape[0], None]
        q[rows:rows + w.shape[0]] = torch.round(w.float() / s).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """int8 ``[out, in]``, scale ``[out]`` -> ``q * scale[:, None]`` in ``dtype``."""
    return (q.float() * scale.float()[:, None]).to(dtype)


def _int8pack_ok(x: torch.Tensor, q: torch.Tensor) -> bool:
    """Whether ``_weight_int8pack_mm`` is the faster exact path for ``x`` (and takes it: its vector
    kernels load 16 or 32 bytes at a time, aligned, with no K tail; ``_aligned`` aligns ``x``)."""
    return (x.shape[0] <= INT8PACK_MAX_ROWS.get(x.dtype, 0) and x.shape[1] % 16 == 0 and q.is_contiguous()
            and q.data_ptr() % 64 == 0)


def _native_ok(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether the native int8 GEMV takes this call: float32 CPU rows, at most ``NATIVE_MAX_ROWS``."""
    return (x.dtype == torch.float32 and x.device.type == "cpu" and x.shape[0] <= NATIVE_MAX_ROWS
            and cpu_native.usable_int8(q, scale) and (bias is None or cpu_native.usable(bias)))


def _aligned(x: torch.Tensor) -> torch.Tensor:
    """``x`` contiguous with every row on a 32-byte boundary (rows of K % 16 == 0 bfloat16 values are)."""
    x = x.contiguous()
    return x if x.data_ptr() % 64 == 0 else x.clone()  # a fresh CPU allocation is 64-byte aligned


def int8_linear(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None,
                backend: str = "torch", scale_act: torch.Tensor | None = None) -> torch.Tensor:
    """x ``[n, in]`` -> ``[n, out]`` in x's dtype: ``x @ (q * scale[:, None]).T (+ bias)``.

    ``scale_act``: ``scale`` already in x's dtype (saves a cast per call on the torch paths).
    """
    if backend == "triton":
        from radixlm.kernels.int8_matmul import int8_matmul

        return int8_matmul(x, q, scale, bias)
    if _native_ok(x, q, scale, bias):
        return cpu_native.linear_int8(x.contiguous(), q, scale, bias)
    if _int8pack_ok(x, q):
        scale_act = scale.to(x.dtype) if scale_act is None or scale_act.dtype != x.dtype else scale_act
        y = torch.ops.aten._weight_int8pack_mm(_aligned(x), q, scale_act)  # [n, out]
    else:  # in float32: a half-precision F.linear would round the unscaled sums
        y = _dequantized_linear(x.float(), q, scale).to(x.dtype)
    return y if bias is None else y + bias


def _dequantized_linear(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """float32 ``x @ (q * scale).T``, dequantizing ``DEQUANT_ROWS`` weight rows at a time, so the float
    copy of a weight never exists whole (an LM head's would be hundreds of MB, kept by the allocator)."""
    if q.shape[0] <= DEQUANT_ROWS:
        return F.linear(x, q.float()) * scale.float()
    y = torch.empty((x.shape[0], q.shape[0]), dtype=torch.float32, device=x.device)
    for start in range(0, q.shape[0], DEQUANT_ROWS):
        end = min(start + DEQUANT_ROWS, q.shape[0])
        y[:, start:end] = F.linear(x, q[start:end].float()) * scale[start:end].float()
    return y


class Int8Linear(nn.Module):
    """``y = x @ (qweight * scale[:, None]).T (+ bias)``: int8 ``qweight [out, in]``, float32 ``scale [out]``.

    The replicated / column-parallel linear; ``backend`` is ``"torch"`` or ``"triton"`` (see module doc).
    """

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
                 dtype: torch.dtype, backend: str = "torch") -> None:
        super().__init__()
        self.backend = backend
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale.float())
        self.register_buffer("scale_act", scale.to(dtype))  # the torch paths' scale, in the activations' dtype
        self.register_buffer("bias", None if bias is None else bias.to(dtype))

    @classmethod
    def from_linear(cls, linear: Linear, backend: str = "torch") -> Int8Linear:
        """Quantize a float ``Linear`` (its weight is not kept)."""
        q, scale = quantize_int8(linear.weight.data)
        bias = None if linear.bias is None else linear.bias.data
        return cls(q, scale, bias, linear.weight.dtype, backend)

    def matmul(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """``x @ W.T (+ bias)`` over any leading dims: ``[..., in] -> [..., out]``."""
        y = int8_linear(x.reshape(-1, x.shape[-1]), self.qweight, self.scale, bias, self.backend, self.scale_act)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.matmul(x, self.bias)

    def extra_repr(self) -> str:
        out, inp = self.qweight.shape
        return f"in_features={inp}, out_features={out}, bias={self.bias is not None}, backend={self.backend}"


class Int8RowParallelLinear(Int8Linear):
    """Int8 ``RowParallelLinear``: this rank's input columns; ``y = all_reduce(x_r @ W_r.T) + bias``."""

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
                 dtype: torch.dtype, tp: TPGroup, backend: str = "torch") -> None:
        super().__init__(qweight, scale, bias, dtype, backend)
        self.tp = tp

    @classmethod
    def from_linear(cls, linear: RowParallelLinear, backend: str = "torch") -> Int8RowParallelLinear:
        """Quantize a ``RowParallelLinear``; the scales come from the full rows (every rank must call this)."""
        weight = linear.weight.data
        q, scale = quantize_int8(weight, row_absmax(weight, linear.tp))
        bias = None if linear.bias is None else linear.bias.data
        return cls(q, scale, bias, weight.dtype, linear.tp, backend)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return self.matmul(x, self.bias)
        y = self.tp.all_reduce(self.matmul(x, None))  # [num_tokens, out_features]
        return y if self.bias is None else y + self.bias


class Int8LMHead(Int8Linear):
    """The LM head over this rank's vocabulary rows: hidden ``[n, hidden]`` -> float32 logits ``[n, vocab]``."""

    def __init__(self, weight: torch.Tensor, vocab_size: int, tp: TPGroup, backend: str = "torch") -> None:
        q, scale = quantize_int8(weight)  # [shard rows, hidden]; zero padding rows stay zero
        super().__init__(q, scale, None, weight.dtype, backend)
        self.vocab_size, self.tp = vocab_size, tp

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.matmul(hidden, None)  # [n, shard rows]
        if self.tp.size > 1:
            logits = self.tp.all_gather(logits)[:, :self.vocab_size]  # [n, vocab_size]
        return logits.float()


def quantize_model(model: nn.Module, method: str | None, backend: str = "torch") -> None:
    """Quantize a loaded ``LlamaForCausalLM`` in place (``method=None``: leave it float): every layer
    (``quantize_layer``) and the head (``quantize_head``); parts already quantized are kept. Every
    tensor-parallel rank must call it (row-parallel scales are all-reduced)."""
    if check_quantization(method) is None:
        return
    for i, layer in enumerate(model.layers):
        model.install(quantize_layer(layer, backend, prefix=f"layers.{i}."))
    model.install(quantize_head(model, backend))


def quantize_layer(layer: nn.Module, backend: str = "torch", prefix: str = "") -> LoadedModules:
    """Int8 versions of a decoder layer's ``qkv_proj``, ``gate_up_proj`` (``Int8Linear``), ``o_proj`` and
    ``down_proj`` (``Int8RowParallelLinear``), those not int8 already, named ``prefix + name``."""
    built = LoadedModules()
    for name, kind in (("qkv_proj", Int8Linear), ("gate_up_proj", Int8Linear), ("o_proj", Int8RowParallelLinear),
                       ("down_proj", Int8RowParallelLinear)):
        linear = getattr(layer, name)
        if not isinstance(linear, (Int8Linear, Int8RowParallelLinear)):
            built.linears[prefix + name] = kind.from_linear(linear, backend)
    return built


def quantize_head(model: nn.Module, backend: str = "torch") -> LoadedModules:
    """The int8 LM head (``Int8LMHead``, from ``lm_head`` or, when tied, from the embedding) and embedding
    (the tied head's int8 rows, or the untied embedding quantized the same way), for ``model.install``
    (which drops the float ones); nothing once done."""
    if model.embed_tokens is None:
        return LoadedModules()
    head = model.embed_tokens if model.lm_head is None else model.lm_head
    lm_head = Int8LMHead(head.data, model.config.vocab_size, model.tp, backend)
    if model.lm_head is None:  # tied: the lookup reads the head's int8 rows
        embedding = Int8Embedding(lm_head.qweight, lm_head.scale, model.embed_tokens.dtype, model.vocab_shard, model.tp)
    else:
        q, scale = quantize_int8(model.embed_tokens.data)
        embedding = Int8Embedding(q, scale, model.embed_tokens.dtype, model.vocab_shard, model.tp)
    return LoadedModules(embedding=embedding, lm_head=lm_head)


class Int8Embedding(nn.Module):
    """The embedding lookup over int8 rows: ids ``[n]`` -> ``q[ids] * scale[ids]`` ``[n, hidden]`` in ``dtype``.

    ``q``/``scale`` are this rank's vocabulary rows (``shard``); under tensor parallelism the rows of
    other ranks are zero here and the all-reduce fills them in, as ``vocab_parallel_embedding`` does.
    """

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, shard, tp: TPGroup) -> None:
        super().__init__()
        self.register_buffer("q", q)  # may be the LM head's own buffer (tied weights)
        self.register_buffer("scale", scale.float())
        self.dtype, self.shard, self.tp = dtype, shard, tp

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return (self.q[ids].float() * self.scale[ids, None]).to(self.dtype)
        outside = (ids < self.shard.start) | (ids >= self.shard.end)  # [n]
        local = torch.where(outside, 0, ids - self.shard.start)
        rows = (self.q[local].float() * self.scale[local, None]).masked_fill_(outside.unsqueeze(-1), 0.0)
        return self.tp.all_reduce(rows.to(self.dtype))


HEAD = -1  # the group of the embedding and the LM head


class QuantizeAsLoaded:
    """Told of every tensor the loader copied (``loaded``), it quantizes a group once complete:
    layer ``i`` (every checkpoint tensor whose parameter is in ``model.layers[i]``) or the
    embedding with the head. A no-op for a float model (``method`` None)."""

    def __init__(self, model: LlamaForCausalLM, method: str | None, backend: str) -> None:
        self.model, self.backend = model, backend
        self.members: dict[int, list[str]] = {}  # group -> its checkpoint names
        self.waiting: dict[int, set[str]] = {}  # group -> the names not loaded yet
        self.group_of: dict[str, int] = {}
        if check_quantization(method) is None:
            return
        owner = {id(p): i for i, layer in enumerate(model.layers) for p in layer.parameters()}
        heads = {id(p) for p in (model.embed_tokens, model.lm_head) if p is not None}
        for name, target in model.checkpoint_layout().items():
            group = HEAD if id(target.param) in heads else owner.get(id(target.param))
            if group is not None:
                self.group_of[name] = group
                self.members.setdefault(group, []).append(name)
        self.waiting = {group: set(names) for group, names in self.members.items()}

    def loaded(self, name: str, layout: CheckpointLayout) -> None:
        """``name`` was copied; quantize its group if it was the last one, and drop the group's
        entries from ``layout`` (the loader's references to its float parameters)."""
        group = self.group_of.get(name)
        if group is None:
            return
        waiting = self.waiting[group]
        waiting.discard(name)
        if waiting:
            return
        if group == HEAD:
            self.model.install(quantize_head(self.model, self.backend))
        else:
            self.model.install(quantize_layer(self.model.layers[group], self.backend, prefix=f"layers.{group}."))
        for member in self.members[group]:
            layout.pop(member, None)
        if self.model.tp.device.type == "cpu":
            release_free_memory()  # the group's float weights, now free, out of the resident set
