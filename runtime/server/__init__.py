"""radixlm.runtime.server: the aiohttp app, SGLang-native and OpenAI-compatible routes.

``create_app(engine, config)`` builds the application around any object with the members of
:class:`ServedEngine` (``Engine`` has them); ``BackgroundServer`` runs one in a thread (tests, notebooks).
"""

from radixlm.runtime.server.app import BackgroundServer, create_app
from radixlm.runtime.server.transport.state import ServedEngine, ServerConfig

__all__ = ["BackgroundServer", "ServedEngine", "ServerConfig", "create_app"]
