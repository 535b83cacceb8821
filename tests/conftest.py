"""Shared fixtures: locally built test checkpoints (cached on disk, built once per machine)."""

from __future__ import annotations

import os

import pytest

# One intra-op thread: test tensors are tiny, and test processes (engines, server subprocesses)
# share two cores in CI, where oversubscribed OpenMP threads run 20x slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Keep tests off the user's real cache unless they point RADIXLM_CACHE somewhere themselves.
os.environ.setdefault("RADIXLM_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "radixlm"))


@pytest.fixture(scope="session")
def checkpoint():
    """Factory: ``checkpoint(arch="llama", size="tiny")`` -> path of a cached test checkpoint."""
    from radixlm.runtime.checkpoints import checkpoint_path

    def get(arch: str = "llama", size: str = "tiny", seed: int = 0) -> str:
        return checkpoint_path(arch=arch, size=size, seed=seed)

    return get


@pytest.fixture(scope="session")
def tiny_llama(checkpoint) -> str:
    """Path of the tiny Llama checkpoint (the embedded default model)."""
    return checkpoint("llama", "tiny")


@pytest.fixture(scope="session")
def tiny_qwen3(checkpoint) -> str:
    """Path of the tiny Qwen3 checkpoint (q/k RMSNorm)."""
    return checkpoint("qwen3", "tiny")
