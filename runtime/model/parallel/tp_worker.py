"""Tensor-parallel worker processes (ranks 1..N-1) and their supervisor on rank 0.

One scheduler decides for all ranks; the other ranks only follow::

    rank 0 (the engine's ModelRunner)               rank r > 0 (a spawned process)
      TPWorkers.start: spawn ranks 1..N-1             run_tp_rank: ModelRunner(args, tp_rank=r, ...)
      TPGroup.init (rendezvous on 127.0.0.1)          TPGroup.init
      load its shard; agree on num_slots              load its shard; agree on num_slots
      each step: check_alive, ForwardBatch,           follow(): spec = recv_spec()
                 send_spec, forward, sample                     ForwardBatch, forward (logits dropped)
      close: send_spec(None), join, terminate          None -> leave the group, exit 0

Both sides build the same ``ModelRunner``, and every change to the KV pool and req_to_token table
comes from a ``BatchSpec`` that all ranks apply, so the pools and tables stay identical. The
workers' entry point (``model_runner.run_tp_rank``) is handed to ``TPWorkers.start``, so this module
never imports the model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch.multiprocessing as mp

logger = logging.getLogger("radixlm.tp")

JOIN_TIMEOUT_S = 10.0


class TPWorkerError(RuntimeError):
    """A tensor-parallel worker process died or the group broke; the engine must be restarted."""


class TPWorkers:
    """Rank 0's handle on the worker processes (ranks ``1 .. len(procs)``)."""

    def __init__(self, procs: list[mp.Process]) -> None:
        self.procs = procs

    @classmethod
    def start(cls, tp_size: int, target: Callable[..., None], args: tuple) -> TPWorkers:
        """Spawn ranks ``1 .. tp_size - 1`` running ``target(rank, *args)`` (daemonic: they never
        outlive the engine process). ``target`` must be a module-level function (it is pickled)."""
        ctx = mp.get_context("spawn")
        procs = []
        for rank in range(1, tp_size):
            proc = ctx.Process(target=target, name=f"radixlm-tp{rank}", daemon=True, args=(rank, *args))
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
