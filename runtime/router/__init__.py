"""radixlm.runtime.router: data-parallel replicas (``launcher``) behind the cache-aware router (``router``: the
proxy, the routes asked of every replica, the merged ``/metrics``; ``policy``: which replica serves a request)."""
