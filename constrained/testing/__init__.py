"""radixlm.constrained.testing: support for grammar tests and benchmarks (random walks through a
matcher); never imported by the serving path."""
