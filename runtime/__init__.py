"""radixlm.runtime: the serving runtime, grouped by role.

``server/`` (HTTP) -> ``engine/`` (in-process API and step loop) -> ``scheduler/`` (no torch) and
``model/`` (tensors, tensor parallelism included) ; ``router/`` (data parallelism) and ``checkpoints/`` (the
locally built test checkpoints) sit beside them. Only the types every part shares live here:
``sampling_params``, ``server_args`` and the ``validation`` helpers they both use. See
docs/DESIGN.md for the map and the allowed imports.
"""
