"""radixlm.runtime.router: data-parallel replicas (``launcher``) behind the cache-aware router (``router``,
``policy``, ``approx_prefix_tree``, ``fanout``, ``metrics_merge``)."""
