"""Connection limits (issue 47, item 8): silent and slow-loris connections are closed after the
header timeout, a slow body after the body timeout, idle keep-alive connections after the
keep-alive timeout, and one client cannot hold more than ``max_connections_per_client``
connections while other clients are still served. The limits are fair (issue 60, item 2): slow
connections (headers still arriving) are evicted for new ones rather than locking anyone out,
``/health`` and ``/metrics`` keep room past a client's cap, and trusted addresses (loopback by
default, ``--forwarded-allow-ips``) have no per-client cap. Clients are told apart by their
loopback source address (127.0.0.2, 127.0.0.3 are untrusted). Timeouts are shortened for the test;
the socket timeouts below are hang guards only."""

from __future__ import annotations

import socket

import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.transport.state import ServerConfig

GUARD_S = 60.0
SHORT_S = 0.5
PER_CLIENT = 4
HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
MODELS = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
SLOW = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # the header block never ends
CLIENT, OTHER = "127.0.0.2", "127.0.0.3"
SLOW_CONNECTIONS = 64


def start(**limits):
    engine = Engine(max_total_tokens=2048, context_length=256, **limits)
    return engine, BackgroundServer(engine, ServerConfig(port=0)).start()


@pytest.fixture(scope="module")
def short_timeouts():
    engine, srv = start(http_header_timeout_s=SHORT_S, http_body_timeout_s=SHORT_S,
                        http_keepalive_timeout_s=2 * SHORT_S)
    yield srv
    srv.stop()
    engine.shutdown()


@pytest.fixture(scope="module")
def few_connections():
    engine, srv = start(max_connections_per_client=PER_CLIENT)
    yield srv
    srv.stop()
    engine.shutdown()


def connect(srv, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(GUARD_S)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", srv.port))
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a hang past GUARD_S fails)."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_silent_connections_are_closed_with_408(short_timeouts):
    socks = [connect(short_timeouts) for _ in range(5)]
    answers = [read_until_closed(s) for s in socks]
    for s in socks:
        s.close()
    assert sum(a.startswith(b"HTTP/1.1 408") and b"header_timeout" in a for a in answers) == 5, answers


def test_slow_loris_headers_are_cut(short_timeouts):
    sock = connect(short_timeouts)
    sent = 0
    request = b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"a" * 100_000
    try:
        for i in range(len(request)):  # one byte per 50 ms: the server must cut it (well before the end)
            sock.sendall(request[i:i + 1])
            sent += 1
            sock.settimeout(0.05)
            try:
                if sock.recv(65536, socket.MSG_PEEK):
                    break
            except TimeoutError:
                continue
    except (BrokenPipeError, ConnectionResetError):
        pass
    sock.settimeout(GUARD_S)
    answer = read_until_closed(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408") and sent < len(request), (sent, answer)


def test_slow_body_gets_408(short_timeouts):
    sock = connect(short_timeouts)
    sock.sendall(b"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"text\": ")
    answer = read_until_closed(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408") and b"body_timeout" in answer, answer


def test_idle_keep_alive_connection_is_closed(short_timeouts):
    sock = connect(short_timeouts)
    sock.sendall(HEALTH)
    answer = read_until_closed(sock)  # the answer, then the server closes the idle connection
    sock.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer


def ask(srv, request: bytes, source: str = "127.0.0.1") -> bytes:
    """``request`` on a new connection from ``source``: the first bytes of the answer."""
    sock = connect(srv, source)
    try:
        sock.sendall(request)
        return sock.recv(65536)
    except ConnectionResetError:
        return b""
    finally:
        sock.close()


def test_per_client_connection_limit(few_connections):
    """Each step waits for its answer before the next connection opens: a connection whose headers
    the server has not read yet is *pending*, and a client past its cap evicts its oldest pending
    connection for a new one (so opening two at once past the cap may evict the first, by design)."""
    srv = few_connections
    held = [connect(srv, CLIENT) for _ in range(PER_CLIENT)]
    for s in held:  # each is admitted and served once (now active: it sent a request)
        s.sendall(HEALTH)
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
    probes = [connect(srv, CLIENT)]  # past the cap: room for /health and /metrics only
    probes[0].sendall(HEALTH)
    assert probes[0].recv(65536).startswith(b"HTTP/1.1 200")
    probes.append(connect(srv, CLIENT))
    probes[1].sendall(MODELS)
    other_route = read_until_closed(probes[1])
    assert other_route.startswith(b"HTTP/1.1 503") and b"too_many_connections" in other_route, other_route
    pending = connect(srv, CLIENT)  # the room freed by the refused one; it never finishes its headers
    pending.sendall(SLOW)
    newer = connect(srv, CLIENT)  # the room is full, but a connection still sending headers gives way
    try:  # a 408, or a reset when the server closed it before reading its bytes
        evicted = read_until_closed(pending)
        assert evicted.startswith(b"HTTP/1.1 408") and b"header_timeout" in evicted, evicted
    except ConnectionResetError:
        pass
    newer.sendall(HEALTH)
    assert newer.recv(65536).startswith(b"HTTP/1.1 200")
    refused = read_until_closed(connect(srv, CLIENT))  # every connection active: refused
    assert refused.startswith(b"HTTP/1.1 503") and b"too_many_connections" in refused, refused
    assert ask(srv, HEALTH, OTHER).startswith(b"HTTP/1.1 200")  # another client is still served
    assert ask(srv, MODELS).startswith(b"HTTP/1.1 200")  # and so is loopback's own address (trusted)
    for s in held + probes + [pending, newer]:
        s.close()


def test_slow_connections_lock_no_one_out(few_connections):
    """64 slow connections (headers never finished) from the trusted loopback address, and 64 from
    one untrusted client: every other client, and that client's own new connections, are served."""
    srv = few_connections
    slow = []
    for source in ("127.0.0.1", CLIENT):
        for _ in range(SLOW_CONNECTIONS):
            sock = connect(srv, source)
            sock.sendall(SLOW)
            slow.append(sock)
    served = sum(ask(srv, request, source).startswith(b"HTTP/1.1 200")
                 for source in ("127.0.0.1", CLIENT, OTHER) for request in (HEALTH, MODELS))
    evicted = 0
    for sock in slow:
        sock.settimeout(0.2)
        try:
            evicted += sock.recv(65536).startswith(b"HTTP/1.1 408")
        except ConnectionResetError:  # closed before the server read its bytes
            evicted += 1
        except TimeoutError:
            pass
        sock.close()
    assert served == 6, served
    # at most 4 x max_connections_per_client may be pending: the oldest of the 128 made room
    assert evicted >= 2 * SLOW_CONNECTIONS - 4 * PER_CLIENT, evicted


def test_slow_second_request_on_a_keep_alive_connection_gets_408(short_timeouts):
    sock = connect(short_timeouts)
    sock.sendall(HEALTH)
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 1")  # then silence: the headers never end
    answer = read_until_closed(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408") and b"header_timeout" in answer, answer
