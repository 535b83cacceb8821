"""The tensor-parallel process group (``TPGroup``) and the wire format of one step's ``BatchSpec``.

Ranks talk over two ``torch.distributed`` groups built once at start-up:

* ``group`` (``nccl`` on CUDA, ``gloo`` on CPU): the forward's all-reduces and all-gathers. Its
  timeout is short (``COLLECTIVE_TIMEOUT_S``): a rank that died mid-forward turns into an error on
  the others, never a hang.
* ``control`` (always ``gloo``, on the host): rank 0 broadcasts each step's ``BatchSpec`` (or the
  stop message) as int64 tensors. Idle workers wait here for the next step, so its timeout is long.

With ``size == 1`` (``TPGroup.single()``) there is no process group at all and every collective is
the identity, so a single-device model pays nothing.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist
from radixlm.runtime.scheduler.batch import BatchSpec

COLLECTIVE_TIMEOUT_S = 120.0  # forward collectives and the start-up rendezvous
IDLE_TIMEOUT = timedelta(days=7)  # a worker waits this long for the next step
_STOP, _STEP = 0, 1
_HEADER_LEN = 7  # kind, is_decode, bs, num_tokens, num_logits, num_table_writes, table-write slots


def tp_device(device: torch.device | str, rank: int, size: int) -> torch.device:
    """Rank ``rank``'s device: ``cuda:<base + rank>`` on CUDA (``base`` = the index asked for, else 0);
    any other device is shared by all ranks. ``ValueError`` naming ``tp_size`` when GPUs are missing."""
    device = torch.device(device)
    if device.type != "cuda":
        return device
    base, count = device.index or 0, torch.cuda.device_count()
    if base + size > count:
        raise ValueError(f"tp_size {size} needs CUDA devices {base}..{base + size - 1}, "
                         f"but {count} are visible")
    return torch.device("cuda", base + rank)


class TPGroup:
    """This process's place in the tensor-parallel group: ``rank`` of ``size`` on ``device``."""

    def __init__(self, rank: int = 0, size: int = 1, device: torch.device | str = "cpu",
                 group: dist.ProcessGroup | None = None, control: dist.ProcessGroup | None = None) -> None:
        self.rank, self.size, self.device = rank, size, torch.device(device)
        self.group, self.control = group, control

    @classmethod
    def single(cls, device: torch.device | str = "cpu") -> TPGroup:
        """The trivial group: rank 0 of 1, no communication."""
        return cls(0, 1, device)

    @classmethod
    def init(cls, rank: int, size: int, port: int, device: torch.device | str,
             timeout_s: float = COLLECTIVE_TIMEOUT_S) -> TPGroup:
        """Join the group rendezvousing at ``tcp://127.0.0.1:port`` (every rank calls this).

        ``nccl`` when ``device`` is CUDA (the caller picks ``cuda:<rank>``), else ``gloo``.
        Raises ``RuntimeError`` when this process already belongs to a group.
        """
        if dist.is_initialized():
            raise RuntimeError("this process already runs a tensor-parallel group; shut the other "
                               "engine down first")
        device = torch.device(device)
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:  # the ranks share the cores: oversubscribed intra-op threads run many times slower
            torch.set_num_threads(min(torch.get_num_threads(), max(1, (os.cpu_count() or 1) // size)))
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size, timeout=timedelta(seconds=timeout_s))
        ranks = list(range(size))
        control = dist.new_group(ranks, timeout=IDLE_TIMEOUT, backend="gloo")
        return cls(rank, size, device, dist.group.WORLD, control)

    @property
    def is_parallel(self) -> bool:
        return self.size > 1

    def destroy(self) -> None:
        """Leave the group (idempotent); the process may join another one afterwards."""
        if self.group is not None and dist.is_initialized():
            dist.destroy_process_group()
        self.group = self.control = None

    # ------------------------------------------------------------------ forward collectives

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks, in place; returns ``x``."""
        if self.size > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def all_gather(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate every rank's ``x`` (same shape on all) along the last dim, rank order."""
        if self.size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)

    def min_int(self, value: int) -> int:
        """The smallest ``value`` over the ranks (so that all ranks agree, e.g. on the KV pool size)."""
        if self.size == 1:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return int(t.item())

    # ------------------------------------------------------------------ step messages

    def send_spec(self, spec: BatchSpec | None) -> None:
        """Rank 0: broadcast the next step's ``spec``, or ``None`` to tell the workers to stop."""
        values = encode_spec(spec)
        header = torch.tensor(values[:_HEADER_LEN], dtype=torch.int64)
        dist.broadcast(header, src=0, group=self.control)
        if len(values) > _HEADER_LEN:
            dist.broadcast(torch.tensor(values[_HEADER_LEN:], dtype=torch.int64), src=0, group=self.control)

    def recv_spec(self) -> BatchSpec | None:
        """Ranks > 0: wait for rank 0's next ``send_spec``; ``None`` means stop."""
        header = torch.empty(_HEADER_LEN, dtype=torch.int64)
        dist.broadcast(header, src=0, group=self.control)
        if header[0].item() == _STOP:
            return None
        payload = torch.empty(_payload_len(header.tolist()), dtype=torch.int64)
        dist.broadcast(payload, src=0, group=self.control)
        return decode_spec(header.tolist() + payload.tolist())


def encode_spec(spec: BatchSpec | None) -> list[int]:
    """``spec`` as a flat int list: a ``_HEADER_LEN`` header, then the lists; ``None`` -> stop."""
    if spec is None:
        return [_STOP] + [0] * (_HEADER_LEN - 1)
    writes = spec.table_writes
    header = [_STEP, int(spec.is_decode), spec.batch_size, len(spec.input_ids), len(spec.logits_indices),
              len(writes), sum(len(slots) for _, _, slots in writes)]
    values = header + spec.req_pool_indices + spec.input_ids + spec.prefix_lens + spec.extend_lens
    values += spec.out_cache_loc + spec.logits_indices
    for row, start, slots in writes:
        values += [row, start, len(slots)]
    for _, _, slots in writes:
        values += slots
    return values


def _payload_len(header: list[int]) -> int:
    _, _, bs, num_tokens, num_logits, num_writes, write_slots = header
    return 3 * bs + 2 * num_tokens + num_logits + 3 * num_writes + write_slots


def decode_spec(values: list[int]) -> BatchSpec:
    """Inverse of ``encode_spec`` for a step message."""
    _, is_decode, bs, num_tokens, num_logits, num_writes, _ = values[:_HEADER_LEN]
    pos = _HEADER_LEN

    def take(n: int) -> list[int]:
        nonlocal pos
        pos += n
        return values[pos - n:pos]

    req_pool_indices, input_ids, prefix_lens = take(bs), take(num_tokens), take(bs)
    extend_lens, out_cache_loc, logits_indices = take(bs), take(num_tokens), take(num_logits)
    meta = take(3 * num_writes)
    writes = [(meta[3 * i], meta[3 * i + 1], take(meta[3 * i + 2])) for i in range(num_writes)]
    return BatchSpec(is_decode=bool(is_decode), req_pool_indices=req_pool_indices, input_ids=input_ids,
                     prefix_lens=prefix_lens, extend_lens=extend_lens, out_cache_loc=out_cache_loc,
                     logits_indices=logits_indices, table_writes=writes)
