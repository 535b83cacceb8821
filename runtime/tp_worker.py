"""Tensor-parallel worker processes (ranks 1..N-1) and their supervisor on rank 0.

One scheduler decides for all ranks; the other ranks only follow::

    rank 0 (the engine's ModelRunner)               rank r > 0 (a spawned process)
      TPWorkers.start: spawn ranks 1..N-1             run_worker: ModelRunner(args, tp_rank=r, ...)
      TPGroup.init (rendezvous on 127.0.0.1)          TPGroup.init
      load its shard; agree on num_slots              load its shard; agree on num_slots
      each step: check_alive, ForwardBatch,           follow(): spec = recv_spec()
                 send_spec, forward, sample                     ForwardBatch, forward (logits dropped)
      close: send_spec(None), join, terminate          None -> leave the group, exit 0

Both sides build the same ``ModelRunner``, and every change to the KV pool and req_to_token table
comes from a ``BatchSpec`` that all ranks apply, so the pools and tables stay identical.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch.multiprocessing as mp

if TYPE_CHECKING:
    from radixlm.runtime.server_args import ServerArgs

logger = logging.getLogger("radixlm.tp")

JOIN_TIMEOUT_S = 10.0


class TPWorkerError(RuntimeError):
    """A tensor-parallel worker process died or the group broke; the engine must be restarted."""


class TPWorkers:
    """Rank 0's handle on the worker processes (ranks ``1 .. len(procs)``)."""

    def __init__(self, procs: list[mp.Process]) -> None:
        self.procs = procs

    @classmethod
    def start(cls, args: ServerArgs, model_path: str, token_vocab_size: int, eos_token_ids: Sequence[int],
              port: int) -> TPWorkers:
        """Spawn ranks ``1 .. args.tp_size - 1`` (daemonic: they never outlive the engine process)."""
        ctx = mp.get_context("spawn")
        procs = []
        for rank in range(1, args.tp_size):
            proc = ctx.Process(target=run_worker, name=f"radixlm-tp{rank}", daemon=True,
                               args=(rank, args, model_path, token_vocab_size, list(eos_token_ids), port))
            proc.start()
            procs.append(proc)
        return cls(procs)

    def check_alive(self, grace_s: float = 0.0) -> None:
        """Raise ``TPWorkerError`` naming the first worker that has exited.

        ``grace_s``: after a failed collective, wait this long for a dying worker's exit code.
        """
        for rank, proc in enumerate(self.procs, start=1):
            if grace_s > 0:
                proc.join(timeout=grace_s)
            if not proc.is_alive():
                raise TPWorkerError(f"tensor-parallel worker rank {rank} (pid {proc.pid}) exited with code "
                                    f"{proc.exitcode}; restart the engine")

    def join(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Wait for the workers to exit; terminate (then kill) those still running after ``timeout_s``."""
        for proc in self.procs:
            proc.join(timeout=timeout_s)
        for proc in self.procs:
            if proc.is_alive():
                logger.warning("tensor-parallel worker %s did not exit; terminating it", proc.name)
                proc.terminate()
                proc.join(timeout=timeout_s)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=timeout_s)


def run_worker(rank: int, args: ServerArgs, model_path: str, token_vocab_size: int, eos_token_ids: list[int],
               port: int) -> None:
    """Entry point of rank ``rank``: build this rank's ``ModelRunner`` and follow rank 0 until told to stop."""
    from radixlm.runtime.model_runner import ModelRunner

    # Ctrl-C reaches the whole process group: rank 0 handles it and sends the stop message
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("radixlm").setLevel(args.log_level.upper())
    runner = ModelRunner(args, model_path, token_vocab_size, eos_token_ids, tp_rank=rank, tp_port=port)
    try:
        runner.follow()
    finally:
        runner.close()
