"""radixlm.runtime.testing: what builds test and benchmark checkpoints (real shapes, llama.cpp fixtures,
real GGUF files). Serving code never imports it (``tests/project/test_architecture.py``)."""

from radixlm.runtime.testing.real_shapes import checkpoint_path, make_real_checkpoint, real_checkpoint_path

__all__ = ["checkpoint_path", "make_real_checkpoint", "real_checkpoint_path"]
