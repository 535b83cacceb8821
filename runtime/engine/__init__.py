"""radixlm.runtime.engine: the in-process ``Engine`` API, its step loop and the grammar glue.

``from radixlm.runtime.engine import Engine`` is the public way in; importing this package loads
torch (through the model runner), so modules that must stay light import the submodules they need.
"""

from radixlm.runtime.engine.engine import Engine, QueueFullError

__all__ = ["Engine", "QueueFullError"]
