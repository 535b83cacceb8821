"""radixlm.lang: the ``@function`` frontend DSL (SGLang's frontend API) and its backends.

The full public surface lives in :mod:`radixlm.lang.api` and is re-exported by ``radixlm``.
"""

from radixlm.lang.api import (
    OpenAI,
    RuntimeEndpoint,
    flush_cache,
    function,
    gen,
    get_server_info,
    select,
    set_default_backend,
)
from radixlm.lang.state import ProgramState

__all__ = ["OpenAI", "ProgramState", "RuntimeEndpoint", "flush_cache", "function", "gen",
           "get_server_info", "select", "set_default_backend"]
