"""radixlm.kernels.testing: support for kernel tests and benchmarks (random paged batches, the
Triton interpreter switch); never imported by the serving path."""
