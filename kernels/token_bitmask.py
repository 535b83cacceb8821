"""Triton application of packed grammar bitmasks to a batch of logits, in place.

Bit ``t % 32`` of int32 word ``t // 32`` in a row says whether token ``t`` is allowed; disallowed
logits become -inf. One program per (row, block of BLOCK_V tokens); only disallowed entries are
written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from radixlm.kernels.contract import check_bitmask
from radixlm.kernels.triton_mode import check_device


@triton.jit
def _bitmask_kernel(Logits, Bitmask, vocab, stride_lb, stride_mb, BLOCK_V: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    in_vocab = offs < vocab
    words = tl.load(Bitmask + row * stride_mb + offs // 32, mask=in_vocab, other=-1)
    allowed = ((words >> (offs % 32)) & 1) != 0
    neg_inf = tl.full([BLOCK_V], float("-inf"), dtype=Logits.dtype.element_ty)
    tl.store(Logits + row * stride_lb + offs, neg_inf, mask=in_vocab & ~allowed)


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set logits ``[bs, vocab]`` of tokens whose bit is clear in ``bitmask`` ``[bs, >= ceil(vocab/32)]`` to -inf.

    A CPU bitmask (the grammar matchers fill CPU tensors) is copied to the logits' device first.
    """
    check_bitmask(logits, bitmask)
    check_device("logits", logits)
    if bitmask.device != logits.device:
        bitmask = bitmask.to(logits.device, non_blocking=True)
    if logits.shape[1] > 1 and logits.stride(1) != 1:
        raise ValueError(f"logits must be contiguous in its last dim, got strides {logits.stride()}")
    if bitmask.shape[1] > 1 and bitmask.stride(1) != 1:
        raise ValueError(f"bitmask must be contiguous in its last dim, got strides {bitmask.stride()}")
    bs, vocab = logits.shape
    if bs == 0 or vocab == 0:
        return
    block_v = 4096
    _bitmask_kernel[(bs, triton.cdiv(vocab, block_v))](
        logits, bitmask, vocab, logits.stride(0), bitmask.stride(0), BLOCK_V=block_v,
    )
