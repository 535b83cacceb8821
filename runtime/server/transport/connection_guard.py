"""Connection-level limits below aiohttp: fair per-client caps and a header-read timeout.

aiohttp parses requests but never times out a connection that sends its headers slowly (its first byte
cancels the keep-alive timer), and accepts any number of connections from one client, so silent
or slow-loris connections can take every file descriptor. :class:`GuardedSite` serves through a
:class:`GuardedProtocol` wrapped around aiohttp's own protocol. A connection is *pending* until
it has sent a complete header block (``\r\n\r\n``), *active* after:

- a connection must send a complete header block within ``header_timeout_s`` of opening, and a
  later request's within ``header_timeout_s`` of its first byte; otherwise it gets a 408 and is
  closed;
- at most ``max_pending`` connections may be pending at once (all clients together): a new one
  past that evicts the oldest pending one (408), so a flood of slow connections can never keep a
  prompt client out;
- a client (remote IP) holding ``max_per_client`` connections has its oldest pending one evicted
  for a new one; when all of them are active, ``PROBE_ROOM`` more connections are admitted for
  ``/health`` and ``/metrics`` only (any other request on them: 503), and beyond that the next
  is refused: a 503 with an OpenAI-shaped body, then the connection is closed;
- addresses in ``trusted`` (``--forwarded-allow-ips``, as uvicorn names it: loopback by default)
  have no per-client cap: every client of a reverse proxy, or of this machine, shares one address.

Idle keep-alive connections (no byte since the last answer) are closed by aiohttp's
``keepalive_timeout``, and the body read is bounded in :mod:`.state` (``http_body_timeout_s``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web

_HEADER_END = b"\r\n\r\n"
PROBE_PATHS = (b"/health", b"/metrics")
MAX_REQUEST_LINE = 8192
PROBE_ROOM = 2  # connections past a client's cap kept for its probes
PENDING_PER_CLIENT_CAP = 4  # max_pending = this x max_per_client
DEFAULT_TRUSTED = "127.0.0.1,::1"


def parse_trusted(spec: str) -> tuple[bool, list[ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    """``(trust every address, networks)`` of a ``--forwarded-allow-ips`` value: comma-separated
    addresses or networks, ``*`` for all; ``ValueError`` naming a bad entry."""
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    networks = []
    for entry in entries:
        if entry == "*":
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"forwarded_allow_ips: {entry!r} is not an IP address or network") from None
    return "*" in entries, networks


def raw_error(status: int, reason: str, message: str, code: str) -> bytes:
    """A whole ``Connection: close`` HTTP/1.1 error response with an OpenAI-shaped body."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error" if status < 500
                                 else "server_overloaded", "param": None, "code": code}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode() + body


class ConnectionGuard:
    """The connection counts and the settings every :class:`GuardedProtocol` shares."""

    def __init__(self, max_per_client: int, header_timeout_s: float, trusted: str = DEFAULT_TRUSTED):
        self.max_per_client = max_per_client
        self.max_pending = PENDING_PER_CLIENT_CAP * max_per_client
        self.header_timeout_s = header_timeout_s
        self.trust_all, self.trusted = parse_trusted(trusted)
        self.open: Counter[str] = Counter()
        self.by_transport: dict[Any, GuardedProtocol] = {}
        self.pending: dict[GuardedProtocol, None] = {}  # oldest first
        self.refused = 0
        self.timed_out = 0
        self.evicted = 0

    def is_trusted(self, client: str) -> bool:
        """True for an address the per-client cap does not apply to (a proxy, this machine)."""
        if self.trust_all:
            return True
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return True  # a Unix socket: no address to tell clients apart by
        return any(address in network for network in self.trusted)

    def request_done(self, transport: Any) -> None:
        """The connection's request was answered: the next one's headers are timed from its first byte."""
        guard = self.by_transport.get(transport)
        if guard is not None:
            guard.idle = True

    def admit(self, conn: GuardedProtocol) -> str:
        """``"ok"``, ``"probe"`` (admitted for ``/health`` and ``/metrics`` only) or ``"refuse"``
        for a new connection of ``conn.client``; evicts pending connections to make room."""
        if len(self.pending) >= self.max_pending:
            next(iter(self.pending)).evict()
        if self.is_trusted(conn.client) or self.open[conn.client] < self.max_per_client:
            return "ok"
        oldest = next((c for c in self.pending if c.client == conn.client), None)
        if oldest is not None:
            oldest.evict()
            return "ok"
        return "probe" if self.open[conn.client] < self.max_per_client + PROBE_ROOM else "refuse"


class GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol ``inner``, behind the connection limits and the header timeout."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard):
        self.inner = inner
        self.guard = guard
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.admitted = False
        self.probe_only = False  # admitted past the cap: /health and /metrics only
        self.line: bytes | None = b""  # a probe-only connection's request line until checked, then None
        self.tail = b""  # the last bytes seen, to find a header end split across reads
        self.timer: asyncio.TimerHandle | None = None
        self.idle = False  # between requests: the next byte starts the next header block

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else ""
        verdict = self.guard.admit(self)
        if verdict == "refuse":
            self.guard.refused += 1
            self._refuse()
            return
        self.probe_only = verdict == "probe"
        self.admitted = True
        self.guard.open[self.client] += 1
        self.guard.by_transport[transport] = self
        self.inner.connection_made(transport)
        self.await_headers()

    def _refuse(self) -> None:
        assert self.transport is not None
        self.transport.write(raw_error(503, "Service Unavailable", "too many connections from this client "
                                       f"(max_connections_per_client={self.guard.max_per_client}; /health and "
                                       "/metrics keep some room)", "too_many_connections"))
        self.transport.close()

    def await_headers(self) -> None:
        """Start timing the next header block (the connection is pending until it ends)."""
        self._cancel_timer()
        self.tail = b""
        self.line = b""
        if self.guard.header_timeout_s > 0 and self.transport is not None:
            loop = asyncio.get_running_loop()
            self.timer = loop.call_later(self.guard.header_timeout_s, self._header_timeout)
            self.guard.pending[self] = None

    def _header_timeout(self) -> None:
        self.timer = None
        self.guard.pending.pop(self, None)
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if transport.get_write_buffer_size():  # still sending a response to a slow reader: not idle
            self.await_headers()
            return
        self.guard.timed_out += 1
        self._close_with(raw_error(408, "Request Timeout", "the request headers did not arrive within "
                                   f"{self.guard.header_timeout_s:g} s (http_header_timeout_s)", "header_timeout"))

    def evict(self) -> None:
        """Close this pending connection (408) to make room for a newer one."""
        self._cancel_timer()
        self.guard.evicted += 1
        self._close_with(raw_error(408, "Request Timeout", "the request headers were still arriving when the "
                                   "connection limit needed the room (http_header_timeout_s, "
                                   "max_connections_per_client)", "header_timeout"))

    def _close_with(self, answer: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        if self.idle:
            self.idle = False
            self.await_headers()
        if self.probe_only:
            data = self._probe_data(data)
            if not data:
                return
        if self.timer is not None:
            seen = self.tail + data
            if _HEADER_END in seen:
                self._cancel_timer()
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def _probe_data(self, data: bytes) -> bytes:
        """On a probe-only connection, the bytes to pass on: none while the request line is
        incomplete or after refusing a path other than ``PROBE_PATHS``, else all held so far."""
        if self.line is None:  # this request's line was checked
            return data
        self.line += data
        if b"\r\n" not in self.line and len(self.line) < MAX_REQUEST_LINE:
            return b""
        parts = self.line.split(b"\r\n", 1)[0].split(b" ")
        path = parts[1].split(b"?", 1)[0] if len(parts) > 1 else b""
        held, self.line = self.line, None
        if path not in PROBE_PATHS:
            self.guard.refused += 1
            self._refuse()
            return b""
        return held

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
        self.guard.pending.pop(self, None)
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
