"""radixlm.runtime.checkpoints: deterministic HF-format test checkpoints built on the fly."""

from radixlm.runtime.checkpoints.synthetic import checkpoint_path, default_model_path, make_checkpoint

__all__ = ["checkpoint_path", "default_model_path", "make_checkpoint"]
