"""radixlm.runtime.server: the aiohttp app, SGLang-native and OpenAI-compatible routes.

``create_app(engine, config)`` builds the application around any object with the members of
:class:`ServedEngine` (``Engine`` has them); ``BackgroundServer`` runs one in a thread (tests, notebooks).
The names are imported on first use, so importing a sub-package does not build the whole server.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {"BackgroundServer": "radixlm.runtime.server.app", "create_app": "radixlm.runtime.server.app",
          "ServedEngine": "radixlm.runtime.server.transport.state",
          "ServerConfig": "radixlm.runtime.server.transport.state"}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)
