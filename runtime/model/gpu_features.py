"""Whether the GPU decode speed-ups (CUDA graphs, overlap scheduling) are switched on.

Both are meant for CUDA and are on there by default (``--disable-cuda-graph`` /
``--disable-overlap-schedule`` turn them off), but only once they have been verified on a device:
until then ``VERIFIED_ON_CUDA`` is False and they stay off unless the environment
variable ``RADIXLM_UNVERIFIED_GPU_FEATURES=1`` asks for them (``benchmarks/gpu_check.sh`` sets it
to measure them on and off; the CPU tests set it to run the overlapped loop). On the CPU, CUDA
graphs never run (there is nothing to capture); the tests drive the bucketing and padding with a
fake graph instead.
"""

from __future__ import annotations

import os

import torch

VERIFIED_ON_CUDA = False  # flip once a device run of benchmarks/gpu_check.sh is green
UNVERIFIED_ENV = "RADIXLM_UNVERIFIED_GPU_FEATURES"


def gpu_feature_enabled(disabled: bool, device: torch.device, *, needs_cuda: bool) -> bool:
    """True when a feature the user did not ``disabled`` should run on ``device``.

    ``needs_cuda``: the feature cannot run anywhere else (CUDA graphs); otherwise the override
    also turns it on on the CPU (the overlapped step loop, for tests).
    """
    if disabled:
        return False
    forced = os.environ.get(UNVERIFIED_ENV) == "1"
    if device.type != "cuda":
        return forced and not needs_cuda
    return VERIFIED_ON_CUDA or forced
