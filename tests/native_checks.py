"""Support for tests of the native CPU kernels against torch: a relative tolerance check and a short
prefill + greedy decode run of a model with the kernels on or off."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from radixlm.kernels import cpu_native


def assert_rel_close(got: torch.Tensor, ref: torch.Tensor, rtol: float = 2e-5) -> None:
    """Same shape, and max |got - ref| <= rtol * max |ref| (float32 rounding: sums in another order)."""
    assert got.shape == ref.shape
    err = ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
    assert err <= rtol, f"relative max error {err:.3g} > {rtol}"


def decode_logits(model: torch.nn.Module, config: object, native: bool, steps: int = 4,
                  kv_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A prefill of 3 requests, then ``steps - 1`` greedy decode steps of batch 3 -> every step's
    logits ``[steps, 3, vocab]``; ``native=False`` runs it under ``cpu_native.torch_only()``;
    ``kv_dtype``: the KV pool's."""
    from radixlm.runtime.model.forward_batch import ForwardBatch
    from radixlm.runtime.model.kv_pool import KVPool, ReqToTokenTable
    from radixlm.runtime.scheduler.batch import BatchSpec

    pool = KVPool(64, config.num_layers, model.num_kv_heads, config.head_dim, kv_dtype, "cpu")
    table, slots, logits = ReqToTokenTable(4, 32, "cpu"), iter(range(1, 64)), []
    ids, lens = [[5, 9, 2], [7], [11, 3, 3, 8]], [0, 0, 0]
    with torch.no_grad(), (nullcontext() if native else cpu_native.torch_only()):
        for step in range(steps):
            new = ids if step == 0 else [[int(t)] for t in logits[-1].argmax(-1)]
            spec = BatchSpec(is_decode=step > 0, req_pool_indices=[0, 1, 2], input_ids=sum(new, []),
                             prefix_lens=list(lens), extend_lens=[len(n) for n in new],
                             out_cache_loc=[next(slots) for _ in sum(new, [])],
                             logits_indices=BatchSpec.last_token_indices([len(n) for n in new]))
            logits.append(model.forward(ForwardBatch.from_spec(spec, table, "cpu"), pool))
            lens = [n + len(x) for n, x in zip(lens, new)]
    return torch.stack(logits)
