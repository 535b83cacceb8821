"""Connection-level limits below aiohttp: a per-client connection cap and a header-read timeout.

aiohttp parses requests but never times out a connection that sends its headers slowly (its first byte
cancels the keep-alive timer), and accepts any number of connections from one client, so silent
or slow-loris connections can take every file descriptor. :class:`GuardedSite` serves through a
:class:`GuardedProtocol` wrapped around aiohttp's own protocol:

- a client (remote IP) holding ``max_per_client`` open connections has the next one refused: a
  503 with an OpenAI-shaped body, then the connection is closed;
- a connection must send a complete header block (up to ``\\r\\n\\r\\n``) within ``header_timeout_s``
  of opening, and a later request's within ``header_timeout_s`` of its first byte; otherwise it
  gets a 408 and is closed.

Idle keep-alive connections (no byte since the last answer) are closed by aiohttp's
``keepalive_timeout``, and the body read is bounded in :mod:`.state` (``http_body_timeout_s``).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web

_HEADER_END = b"\r\n\r\n"


def raw_error(status: int, reason: str, message: str, code: str) -> bytes:
    """A whole ``Connection: close`` HTTP/1.1 error response with an OpenAI-shaped body."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error" if status < 500
                                 else "server_overloaded", "param": None, "code": code}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode() + body


class ConnectionGuard:
    """The per-client connection counts and the settings every :class:`GuardedProtocol` shares."""

    def __init__(self, max_per_client: int, header_timeout_s: float):
        self.max_per_client = max_per_client
        self.header_timeout_s = header_timeout_s
        self.open: Counter[str] = Counter()
        self.by_transport: dict[Any, GuardedProtocol] = {}
        self.refused = 0
        self.timed_out = 0

    def request_done(self, transport: Any) -> None:
        """The connection's request was answered: the next one's headers are timed from its first byte."""
        guard = self.by_transport.get(transport)
        if guard is not None:
            guard.idle = True


class GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol ``inner``, behind the per-client cap and the header timeout."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard):
        self.inner = inner
        self.guard = guard
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.admitted = False
        self.tail = b""  # the last bytes seen, to find a header end split across reads
        self.timer: asyncio.TimerHandle | None = None
        self.idle = False  # between requests: the next byte starts the next header block

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else ""
        if self.guard.open[self.client] >= self.guard.max_per_client:
            self.guard.refused += 1
            transport.write(raw_error(503, "Service Unavailable", f"too many connections from this client "
                                      f"(max_connections_per_client={self.guard.max_per_client})",
                                      "too_many_connections"))
            transport.close()
            return
        self.admitted = True
        self.guard.open[self.client] += 1
        self.guard.by_transport[transport] = self
        self.inner.connection_made(transport)
        self.await_headers()

    def await_headers(self) -> None:
        """Start timing the next header block."""
        self._cancel_timer()
        self.tail = b""
        if self.guard.header_timeout_s > 0 and self.transport is not None:
            loop = asyncio.get_running_loop()
            self.timer = loop.call_later(self.guard.header_timeout_s, self._header_timeout)

    def _header_timeout(self) -> None:
        self.timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if transport.get_write_buffer_size():  # still sending a response to a slow reader: not idle
            self.await_headers()
            return
        self.guard.timed_out += 1
        transport.write(raw_error(408, "Request Timeout", "the request headers did not arrive within "
                                  f"{self.guard.header_timeout_s:g} s (http_header_timeout_s)", "header_timeout"))
        transport.close()

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        if self.idle:
            self.idle = False
            self.await_headers()
        if self.timer is not None:
            seen = self.tail + data
            if _HEADER_END in seen:
                self._cancel_timer()
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if not self.admitted:
            return
        self.admitted = False
        self.guard.open[self.client] -= 1
        if self.guard.open[self.client] <= 0:
            del self.guard.open[self.client]
        self.guard.by_transport.pop(self.transport, None)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class GuardedSite(web.SockSite):
    """``web.SockSite`` whose connections go through a :class:`GuardedProtocol`."""

    def __init__(self, runner: web.BaseRunner, sock: Any, guard: ConnectionGuard, **kwargs: Any):
        super().__init__(runner, sock, **kwargs)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server: Callable[[], asyncio.Protocol] = self._runner.server  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: GuardedProtocol(server(), self.guard),
                                                sock=self._sock, ssl=self._ssl_context, backlog=self._backlog)
