"""radixlm.runtime.model: the model runner, the Llama-family model, KV pool, attention, sampler.

The only part of the runtime that turns lists into tensors (``forward_batch``, ``model_runner``).
"""
