"""Connection limits (issue 47, item 8): silent and slow-loris connections are closed after the
header timeout, a slow body after the body timeout, idle keep-alive connections after the
keep-alive timeout, and one client cannot hold more than ``max_connections_per_client``
connections while other clients are still served. Timeouts are shortened for the test; the
socket timeouts below are hang guards only."""

from __future__ import annotations

import socket

import pytest
from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.app import BackgroundServer
from radixlm.runtime.server.state import ServerConfig

GUARD_S = 60.0
SHORT_S = 0.5
PER_CLIENT = 4
HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


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


def test_per_client_connection_limit(few_connections):
    srv = few_connections
    held = [connect(srv) for _ in range(PER_CLIENT)]
    for s in held:  # each is admitted and served once
        s.sendall(HEALTH)
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
    extra = connect(srv)
    refused = read_until_closed(extra)
    extra.close()
    assert refused.startswith(b"HTTP/1.1 503") and b"too_many_connections" in refused, refused
    other = connect(srv, "127.0.0.2")  # another client is still served
    other.sendall(HEALTH)
    assert other.recv(65536).startswith(b"HTTP/1.1 200")
    other.close()
    held.pop().close()  # a freed slot admits the client again (once the server has seen the close)
    for _ in range(200):
        again = connect(srv)
        again.sendall(HEALTH)
        answer = again.recv(65536)
        again.close()
        if answer.startswith(b"HTTP/1.1 200"):
            break
    assert answer.startswith(b"HTTP/1.1 200"), answer
    for s in held:
        s.close()


def test_slow_second_request_on_a_keep_alive_connection_gets_408(short_timeouts):
    sock = connect(short_timeouts)
    sock.sendall(HEALTH)
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 1")  # then silence: the headers never end
    answer = read_until_closed(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408") and b"header_timeout" in answer, answer
