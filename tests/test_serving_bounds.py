"""Every connection bounded, tried as a hostile client against real ``idmint serve`` processes: bodies promised and
never sent (408 after ``IDMINT_BODY_TIMEOUT``, then closed), more connections from one client address than
``IDMINT_MAX_CONNECTIONS_PER_CLIENT`` (429 as accepted), and a node under a low open-file limit held by many idle
connections: it refuses new ones (503) before its own files starve, stays ready and keeps issuing leased IDs."""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.raw_http import Reader, connect
from tests.support.server import Server

DEADLINE_S = 60.0
"""A guard on every wait (the condition ends it), not a time budget."""


def until(condition: object, what: str) -> None:
    """Poll ``condition`` (a callable) until it is true; fail naming ``what`` after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S} s: {what}")
        time.sleep(0.05)


def read_to_close(sock: socket.socket) -> bytes:
    """Every byte the server writes until it closes the connection (a reset ends it too)."""
    data = b""
    sock.settimeout(DEADLINE_S)
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def status_and_detail(data: bytes) -> tuple[int, str]:
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), str(json.loads(body)["detail"])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    replica = Server(
        tmp_path_factory.mktemp("bounds"),
        {
            "IDMINT_BODY_TIMEOUT": "1",
            "IDMINT_MAX_CONNECTIONS_PER_CLIENT": "6",
            "IDMINT_KEEP_ALIVE_TIMEOUT": "600",
        },
    )
    try:
        replica.wait_ready()
        yield replica
    finally:
        replica.stop()


PROMISES = [
    b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n",
    b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /v1/ids/ksuid HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{",
    b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n",
]


def test_a_body_that_never_comes_is_a_408_then_closed(server: Server) -> None:
    # Five at a time (the cap per client is six), every kind of promise: a length, chunked (to a route that takes
    # a body and to one that takes none), a body begun and left.
    for _ in range(3):
        socks = [connect(server.port) for _ in PROMISES]
        try:
            for sock, promise in zip(socks, PROMISES, strict=True):
                sock.sendall(promise)
            for sock in socks:
                status, detail = status_and_detail(read_to_close(sock))  # then the server closed it
                assert status == 408 and "IDMINT_BODY_TIMEOUT" in detail, detail
        finally:
            for sock in socks:
                sock.close()
    assert "Traceback" not in server.log()


def test_a_body_that_comes_in_time_in_pieces_is_read(server: Server) -> None:
    body = b'{"text": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}'
    with connect(server.port) as sock:
        sock.sendall(
            b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body[:10])
        )
        sock.sendall(body[10:])
        answer = Reader(sock).response("POST")
    assert answer.status == 200, answer.body


def test_connections_past_the_cap_per_client_are_a_429_and_others_are_served(server: Server) -> None:
    held = [connect(server.port) for _ in range(6)]
    try:
        for sock in held:  # each accepted and served: six are open
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert Reader(sock).response().status == 200
        with connect(server.port) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            status, detail = status_and_detail(read_to_close(extra))
        assert status == 429 and "IDMINT_MAX_CONNECTIONS_PER_CLIENT" in detail and "127.0.0.1" in detail, detail
        # Another client address is served meanwhile.
        with socket.create_connection(
            ("127.0.0.1", server.port), timeout=DEADLINE_S, source_address=("127.0.0.2", 0)
        ) as other:
            other.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert Reader(other).response().status == 200
        # One of the six closed: this client is served again.
        held.pop().close()

        def served() -> bool:
            with connect(server.port) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return read_to_close(sock).startswith(b"HTTP/1.1 200")

        until(served, "a connection is served once the client holds fewer than its cap")
    finally:
        for sock in held:
            sock.close()


OPEN_FILES = 256
HELD = 300
QUIET_S = 1.0
"""How long no held connection answers before the rest count as held (a refusal is written as the server accepts)."""


def test_a_node_under_a_low_open_file_limit_refuses_connections_before_its_own_files_starve(
    tmp_path: Path,
) -> None:
    replica = Server(
        tmp_path,
        {"IDMINT_KEEP_ALIVE_TIMEOUT": "600", "IDMINT_MAX_CONNECTIONS_PER_CLIENT": "100000"},
        open_files=OPEN_FILES,
    )
    socks: list[socket.socket] = []
    try:
        replica.wait_ready()
        marks = list(replica.state_dir.glob("snowflake/*/*.mark"))
        assert marks, "no snowflake mark"
        for _ in range(HELD):
            socks.append(connect(replica.port))
        # Each connection is either held (the server writes nothing) or refused at once (503, then closed): the
        # refused are those that answer before the connections fall quiet for QUIET_S.
        refused: list[socket.socket] = []
        with selectors.DefaultSelector() as waiting:
            for sock in socks:
                waiting.register(sock, selectors.EVENT_READ)
            while answered := waiting.select(QUIET_S):
                for key, _ in answered:
                    answering = key.fileobj
                    assert isinstance(answering, socket.socket)
                    waiting.unregister(answering)
                    answering.settimeout(DEADLINE_S)
                    status, detail = status_and_detail(answering.recv(65536))
                    assert status == 503 and "IDMINT_FD_RESERVE" in detail, detail
                    refused.append(answering)
        held = [sock for sock in socks if sock not in refused]
        assert refused and held, (len(refused), len(held))
        print(f"{len(held)} connections held, {len(refused)} refused under RLIMIT_NOFILE={OPEN_FILES}")
        # Free a few slots; the node, its files never starved, is ready and issues leased IDs (its mark advances).
        for sock in held[:10]:
            sock.close()
        stamp = max(mark.stat().st_mtime_ns for mark in marks)
        issued: list[int] = []

        def issues() -> bool:
            with httpx.Client(timeout=DEADLINE_S) as client:
                ready = client.get(f"{replica.url}/readyz")
                answer = client.get(f"{replica.url}/v1/ids/snowflake?count=1000")
            if ready.status_code != 200 or answer.status_code != 200:
                return False
            issued.extend(int(x) for x in answer.json()["ids"])
            return max(mark.stat().st_mtime_ns for mark in marks) > stamp

        until(issues, "the node, its connection slots full, stays ready and issues (its high-water mark written)")
        assert len(set(issued)) == len(issued)
        log = replica.log()
        assert "Too many open files" not in log and "Traceback" not in log, replica.log_tail()
        assert "connection(s) refused as accepted" in log
    finally:
        for sock in socks:
            sock.close()
        replica.stop()
