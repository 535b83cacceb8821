"""``ForwardBatch``: one model forward's ``BatchSpec`` (plain lists, from the scheduler) as device
tensors, for the model and kernels.

The new tokens of all requests are flattened into one row per token: request i owns rows
``qo_indptr[i]:qo_indptr[i+1]``; its whole context (cached prefix + new tokens) is the KV slots
``kv_indices[kv_indptr[i]:kv_indptr[i+1]]`` in position order.

"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from radixlm.runtime.model.kv_pool import ReqToTokenTable
from radixlm.runtime.scheduler.batch import BatchSpec


@dataclass
class ForwardBatch:
    """Device tensors for one forward; build with ``ForwardBatch.from_spec``. All int64."""

    is_decode: bool
    batch_size: int
    input_ids: torch.Tensor  # [num_tokens]
    positions: torch.Tensor  # [num_tokens] prefix_len + j for request's j-th new token
    out_cache_loc: torch.Tensor  # [num_tokens] KV slot each new token's K/V is stored in
    qo_indptr: torch.Tensor  # [bs + 1]
    kv_indptr: torch.Tensor  # [bs + 1]
    kv_indices: torch.Tensor  # [total_kv]
    logits_indices: torch.Tensor  # [num_logits]
    req_pool_indices: torch.Tensor  # [bs]
    max_extend_len: int = 1  # host copy of max(extend_lens): sizes kernel grids without a device sync
    # leading kv_indices every request shares (same slots: a radix-cache prefix, within every
    # request's cached prefix_len); 0 = none
    shared_prefix_len: int = 0

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[0]

    @classmethod
    def from_spec(cls, spec: BatchSpec, req_to_token: ReqToTokenTable, device: torch.device | str, *,
                  detect_shared_prefix: bool = False) -> ForwardBatch:
        """Validate ``spec``, apply its table writes, write ``out_cache_loc`` into the table, and
        build the tensors (``kv_indices`` is gathered from the table: prefix + new slots).

        ``detect_shared_prefix``: for batches of two or more distinct requests (decode or extend), also find
        ``shared_prefix_len``, at most the shortest ``prefix_len`` (one table compare per step, and
        one host sync: meant for the torch attention backend, which uses it for cascade attention;
        below ``MIN_SHARED_PREFIX_LEN`` it stays 0).
        """
        spec.validate()
        kv_lens = [p + n for p, n in zip(spec.prefix_lens, spec.extend_lens)]
        if max(kv_lens) > req_to_token.max_context_len:
            raise ValueError(f"prefix_lens + extend_lens {kv_lens} exceed the req_to_token table's "
                             f"max_context_len {req_to_token.max_context_len}")
        for req_pool_index, start, slots in spec.table_writes:
            req_to_token.write(req_pool_index, start, slots)

        def tensor(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.int64).to(device, non_blocking=True)

        num_tokens, total_kv = len(spec.input_ids), sum(kv_lens)
        req_pool_indices = tensor(spec.req_pool_indices)  # [bs]
        extend_lens = tensor(spec.extend_lens)  # [bs]
        kv_lens_t = tensor(kv_lens)  # [bs]
        qo_indptr = _indptr(extend_lens)  # [bs + 1]
        kv_indptr = _indptr(kv_lens_t)  # [bs + 1]

        # positions: prefix_len + (row - first row of its request)
        offsets = tensor(spec.prefix_lens) - qo_indptr[:-1]  # [bs]
        positions = torch.arange(num_tokens, device=device) + torch.repeat_interleave(
            offsets, extend_lens, output_size=num_tokens)  # [num_tokens]
        out_cache_loc = tensor(spec.out_cache_loc)  # [num_tokens]
        token_rows = torch.repeat_interleave(req_pool_indices, extend_lens, output_size=num_tokens)
        req_to_token.table[token_rows, positions] = out_cache_loc

        kv_rows = torch.repeat_interleave(req_pool_indices, kv_lens_t, output_size=total_kv)
        kv_cols = torch.arange(total_kv, device=device) - torch.repeat_interleave(
            kv_indptr[:-1], kv_lens_t, output_size=total_kv)  # position within its request
        kv_indices = req_to_token.table[kv_rows, kv_cols]  # [total_kv]

        return cls(
            is_decode=spec.is_decode,
            batch_size=spec.batch_size,
            input_ids=tensor(spec.input_ids),
            positions=positions,
            out_cache_loc=out_cache_loc,
            qo_indptr=qo_indptr,
            kv_indptr=kv_indptr,
            kv_indices=kv_indices,
            logits_indices=tensor(spec.logits_indices),
            req_pool_indices=req_pool_indices,
            max_extend_len=max(spec.extend_lens),
            # between different requests (a verify step's rows of one request share their own prefix)
            shared_prefix_len=(_shared_prefix_len(req_to_token.table, req_pool_indices, min(spec.prefix_lens))
                               if detect_shared_prefix and len(set(spec.req_pool_indices)) > 1 else 0),
        )


MIN_SHARED_PREFIX_LEN = 32  # shorter shared prefixes are not worth a second attention pass


def _shared_prefix_len(table: torch.Tensor, req_pool_indices: torch.Tensor, max_len: int) -> int:
    """How many leading table columns (at most ``max_len``) hold the same slot in every row
    ``req_pool_indices``; 0 when that is under ``MIN_SHARED_PREFIX_LEN``."""
    if max_len < MIN_SHARED_PREFIX_LEN:
        return 0
    rows = table[req_pool_indices, :max_len]  # [bs, max_len]
    same = (rows == rows[:1]).all(dim=0)  # [max_len]
    shared = int(same.cumprod(dim=0).sum())  # length of the leading run of True
    return shared if shared >= MIN_SHARED_PREFIX_LEN else 0


def _indptr(lens: torch.Tensor) -> torch.Tensor:
    """[bs] lengths -> [bs + 1] exclusive prefix sums starting at 0."""
    return torch.nn.functional.pad(torch.cumsum(lens, dim=0), (1, 0))
