"""The server tests' shared fixture: a live server on the tiny model, one per module (a module that
needs other settings defines its own ``server``)."""

from __future__ import annotations

import pytest
from radixlm.runtime.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig


@pytest.fixture(scope="module")
def server():
    engine = Engine(max_total_tokens=16384, random_seed=0)
    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    yield srv
    srv.stop()
    engine.shutdown()
