"""radixlm.runtime.scaleout: tensor parallelism (``distributed``, ``tp_worker``) and data-parallel
replicas behind the cache-aware router (``dp_launcher``, ``router``, ``router_policy``,
``approx_prefix_tree``)."""
