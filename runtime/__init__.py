"""radixlm.runtime: the serving runtime, grouped by role.

``router/`` (data parallelism: replicas behind one router) -> ``server/`` (HTTP) -> ``engine/``
(in-process API and step loop) -> ``scheduler/`` (no torch) and ``model/`` (tensors, tensor
parallelism in ``model/parallel/``). ``chat_formats/`` (tool calls and reasoning in the output,
HTTP-free), ``tokenizer/`` and ``checkpoints/`` (the locally built test checkpoints) sit below
the parts that use them. Only what every part shares lives at this root: ``sampling_params`` (with
the field checks ``server_args`` uses too), ``server_args``, ``stop_regex``, ``gguf_path``,
``load_progress``, and :func:`free_port` here (a free TCP port: the TP rendezvous, the router's
replicas, test servers). See docs/DESIGN.md for the map and the allowed imports.
"""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
