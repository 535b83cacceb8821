"""radixlm.runtime: the serving runtime, grouped by role.

``router/`` (data parallelism: replicas behind one router) -> ``server/`` (HTTP) -> ``engine/``
(in-process API and step loop) -> ``scheduler/`` (no torch) and ``model/`` (tensors, tensor
parallelism in ``model/parallel/``). ``chat_formats/`` (tool calls and reasoning in the output,
HTTP-free), ``tokenizer/`` and ``checkpoints/`` (the locally built test checkpoints) sit below
the parts that use them. Only the types every part shares live here:
``sampling_params``, ``server_args`` and the ``validation`` helpers they both use, and ``ports``
(a free TCP port: the TP rendezvous, the router's replicas). See docs/DESIGN.md for the map and
the allowed imports.
"""
