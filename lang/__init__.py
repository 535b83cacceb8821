"""radixlm.lang: the ``@function`` frontend DSL (SGLang's frontend API) and its backends.

The full public surface lives in :mod:`radixlm.lang.api` and is re-exported by ``radixlm``.
"""

from .api import (
    RuntimeEndpoint,
    function,
    gen,
    select,
    set_default_backend,
)
from .state import ProgramState

__all__ = ["ProgramState", "RuntimeEndpoint", "function", "gen", "select", "set_default_backend"]
