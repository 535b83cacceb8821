"""``radixlm serve --dp-size N``: N engine replicas behind one cache-aware router.

Each replica is a full ``radixlm serve`` process on an internal loopback port, started from the
same ``ServerArgs`` (on a machine with several GPUs, replica i gets ``cuda:(i % num_gpus)``); the
router listens on the public host and port. SIGINT/SIGTERM stop the router, then the replicas.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

from radixlm.runtime import free_port

logger = logging.getLogger("radixlm.dp")


def server_args_to_argv(server_args: Any) -> list[str]:
    """The ``radixlm serve`` flags that rebuild ``server_args`` (fields left at default are omitted)."""
    argv: list[str] = []
    for f in dataclasses.fields(server_args):
        value = getattr(server_args, f.name)
        default = f.default if f.default is not dataclasses.MISSING else None
        if value == default or value is None:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + f.name.replace("_", "-"))
        else:
            argv += [flag, str(value)]
    return argv


# ``python -m radixlm`` would put the current directory first on sys.path, so a folder there named
# ``radixlm`` (a clone, say) would shadow the installed package; ``-c`` puts "" there, which this drops.
REPLICA_BOOTSTRAP = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
                     "from radixlm.__main__ import main; sys.exit(main())")


def replica_command() -> list[str]:
    """``radixlm serve`` as a replica starts it: the installed package, whatever the current directory holds."""
    return [sys.executable, "-c", REPLICA_BOOTSTRAP, "serve"]


def replica_device(server_args: Any, index: int) -> str | None:
    """Spread replicas over the visible GPUs (replica i starts at GPU i * tp_size, so tensor-parallel
    groups do not overlap); None leaves the device as configured."""
    if server_args.device not in ("auto", "cuda"):
        return None
    try:
        import torch

        n = torch.cuda.device_count()
    except ImportError:
        n = 0
    return f"cuda:{(index * getattr(server_args, 'tp_size', 1)) % n}" if n > 1 else None


def start_replicas(server_args: Any, dp_size: int, extra_argv: list[str] | None = None,
                   host: str = "127.0.0.1", ready_timeout_s: float = 600.0) -> tuple[list[subprocess.Popen], list[str]]:
    """Start ``dp_size`` replica servers and wait until each answers ``/health``."""
    if dp_size < 1:
        raise ValueError(f"dp_size must be >= 1, got {dp_size}")
    procs, urls = [], []
    base = server_args_to_argv(server_args) + list(extra_argv or [])
    try:
        for i in range(dp_size):
            port = free_port(host)
            argv = [*replica_command(), "--host", host, "--port", str(port), *base]
            device = replica_device(server_args, i)
            if device:
                argv += ["--device", device]
            procs.append(subprocess.Popen(argv, env=dict(os.environ)))
            urls.append(f"http://{host}:{port}")
        for url, proc in zip(urls, procs):
            wait_ready(url, proc, ready_timeout_s)
    except BaseException:
        stop_replicas(procs)
        raise
    return procs, urls


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    """Poll ``url``/health until it answers 200; raise if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"replica {url} exited with code {proc.returncode} during start-up")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"replica {url} did not become healthy within {timeout_s:.0f} s")


def stop_replicas(procs: list[subprocess.Popen], timeout_s: float = 60.0) -> None:
    """SIGTERM every replica (they shut down gracefully), then kill stragglers."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve_data_parallel(server_args: Any, dp_size: int, host: str, port: int,
                        extra_argv: list[str] | None = None, policy: str = "cache_aware") -> int:
    """Run ``dp_size`` replicas and the router until SIGINT/SIGTERM; returns the exit code."""
    from radixlm.runtime.router.policy import RoutingConfig
    from radixlm.runtime.router.router import RouterConfig, run_router

    procs, urls = start_replicas(server_args, dp_size, extra_argv)
    try:
        logger.warning("data parallel: %d replicas behind http://%s:%d", dp_size, host, port)
        run_router(RouterConfig(workers=urls, routing=RoutingConfig(policy=policy)), host=host, port=port,
                   allowed_hosts=getattr(server_args, "allowed_hosts", None))
    finally:
        stop_replicas(procs)
    return 0
