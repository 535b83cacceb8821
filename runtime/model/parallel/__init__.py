"""radixlm.runtime.model.parallel: tensor parallelism (the rank group, its worker processes, the sharded layers)."""
