"""Bounded work per request, tried as a hostile client against a real ``idmint serve``: huge bodies (declared and
chunked), bodies sent to routes that take none, a client that writes its whole body before reading, requests
without Host, of another HTTP version or with an unknown expectation, unknown JSON members, free-text decoding that
must neither block the event loop nor run past its limit."""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import Server

MB = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    replica = Server(tmp_path_factory.mktemp("limits"), {})
    try:
        replica.wait("/readyz")
        yield replica
    finally:
        replica.stop()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), None
    )
    while length is not None and len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(head.split()[1]), body


def test_a_declared_100_mb_body_is_refused_before_it_is_read(server: Server) -> None:
    before = rss_kib(server.pid)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (100 * MB)
        )
        sock.sendall(b'{"text": "' + b"A" * 65536)  # a little of it; the answer must not wait for the rest
        status, body = read_response(sock)
    assert status == 413
    assert b"at most 2097152 bytes" in body
    assert rss_kib(server.pid) - before < 10 * 1024


def test_a_chunked_100_mb_body_is_cut_off_at_the_limit_with_flat_memory(server: Server) -> None:
    before = rss_kib(server.pid)
    peak = before
    sent = 0
    chunk = b"A" * 65536
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        try:
            while sent < 100 * MB:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
                if sent % (4 * MB) == 0:
                    peak = max(peak, rss_kib(server.pid))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed: the rest is never read
        status, body = read_response(sock)
    assert status == 413, body
    assert b"at most 2097152 bytes" in body
    assert sent < 100 * MB  # cut off, not swallowed
    assert peak - before < 20 * 1024, (before, peak)


def test_413_is_json_and_counted(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/decode", content=b"x" * (3 * MB), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.headers["content-type"] == "application/json"
    assert r.headers["x-content-type-options"] == "nosniff"
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'route="/v1/decode",status="413"' in metrics


def test_unknown_json_members_are_a_422_naming_them(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/decode", json={"text": "x", "txet": "y"})
    assert r.status_code == 422
    assert "txet" in r.json()["detail"]


@pytest.mark.parametrize("filler", [0, 20_000])  # parsed on the event loop / in the decode worker process
@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"text": "a", "text": "b"}', "text must be given once"),
        ('{"text": "a"}'.encode("utf-16"), "in UTF-8"),
        (b'["text"]', "JSON object"),
        (b"[" * 5000, "JSON object"),  # deeper than json's recursion limit: was a 500
        (b'{"text": 7}', "text: Input should be a valid string"),
        (b"{}", "text: Field required"),
    ],
)
def test_a_decode_body_breaking_a_rule_is_a_422_naming_it(
    server: Server, body: bytes, fragment: str, filler: int
) -> None:
    if filler:
        body = body + b" " * filler  # JSON allows trailing whitespace: the same body, too long to parse inline
    # 60 s, not httpx's 5: a long body is parsed in the decode worker process, which a loaded machine may still be
    # starting for the first of them.
    r = httpx.post(f"{server.url}/v1/decode", content=body, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 422, r.text
    assert fragment in r.json()["detail"], r.json()


def test_free_text_decoding_stops_at_its_item_limit(server: Server) -> None:
    ids = httpx.get(f"{server.url}/v1/ids/wiji?count=6000").json()["ids"]
    r = httpx.post(f"{server.url}/v1/decode", json={"text": "\n".join(ids)}, timeout=60)
    body = r.json()
    assert r.status_code == 200 and len(body["items"]) == 5000 and body["truncated"] is True


def test_free_text_decoding_leaves_the_event_loop_free(server: Server) -> None:
    line = "2026-11-21 12:00:01 ERROR order 01FZ11RQKT000002NAM48H248H failed for 5D5EAC793E61F-1BFC71B112D-0000000B\n"
    text = line * (900_000 // len(line))
    finished: list[float] = []

    def post() -> None:
        httpx.post(f"{server.url}/v1/decode", json={"text": text}, timeout=60).raise_for_status()
        finished.append(time.monotonic())

    posters = [threading.Thread(target=post) for _ in range(2)]
    for t in posters:
        t.start()
    time.sleep(0.2)  # both bodies are in; decoding is under way
    answered: list[int] = []
    while not finished and len(answered) < 200:
        r = httpx.get(f"{server.url}/v1/ids/wiji")
        assert r.status_code == 200
        answered.append(time.monotonic())
    for t in posters:
        t.join(60)
    # Single-ID requests were answered while the two decodes ran (not queued behind them).
    assert len([t for t in answered if t < min(finished)]) >= 3, (len(answered), finished)


def test_clients_gone_mid_body_are_499_in_one_log_line_each(server: Server) -> None:
    lines_before = len(server.log().splitlines())
    bodies = [
        b"Content-Length: 1000\r\n\r\n" + b'{"text": "01FZ11RQKT',
        b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"tex\r\n',
    ]
    for i in range(30):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + bodies[i % 2])
    # Each is counted once the server has seen it go: wait for all thirty (on the count, not a time).
    pattern = re.compile(r'^idmint_requests_total\{method="POST",route="/v1/decode",status="499"\} (\S+)$', re.M)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        metrics = httpx.get(f"{server.url}/metrics").text
        match = pattern.search(metrics)
        if match and float(match.group(1)) >= 30:
            break
        time.sleep(0.05)
    assert match and float(match.group(1)) == 30, metrics
    assert 'route="/v1/decode",status="500"' not in metrics
    new_lines = server.log().splitlines()[lines_before:]
    gone = [line for line in new_lines if "went away before its request body was complete" in line]
    assert len(gone) == 30 and all(" INFO " in line for line in gone), gone[:3]
    assert len(new_lines) == 30, new_lines[:40]  # one line each: no traceback


def test_a_50_mb_chunked_body_to_a_route_that_takes_none_is_refused_before_it_acts(server: Server) -> None:
    # POST /v1/admin/drain takes no body: the node must not drain while (or after) one is sent to it.
    before = rss_kib(server.pid)
    sent = 0
    chunk = b"A" * 65536
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/admin/drain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            while sent < 50 * MB:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused, and the rest cut off
        status, body = read_response(sock)
    assert status == 413 and b"at most 2097152 bytes" in body, body
    assert sent < 50 * MB
    assert rss_kib(server.pid) - before < 20 * 1024
    assert httpx.get(f"{server.url}/readyz").status_code == 200  # not drained
    assert httpx.get(f"{server.url}/v1/ids/wiji").status_code == 200


@pytest.mark.parametrize(
    ("head", "body", "status"),
    [
        (b"POST /v1/admin/drain HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n", b"{}", 422),
        (b"POST /v1/admin/drain HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\n\r\n", b"", 413),
        (
            b"POST /v1/admin/drain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"2\r\n{}\r\n0\r\n\r\n",
            422,
        ),
        (b"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n", b"x", 422),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", b"1\r\nx\r\n0\r\n\r\n", 422),
    ],
    ids=["drain-length", "drain-over-the-limit", "drain-chunked", "issue-length", "health-chunked"],
)
def test_a_body_to_a_route_that_takes_none_is_refused(server: Server, head: bytes, body: bytes, status: int) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head + body)
        got, answer = read_response(sock)
    assert got == status, answer
    assert b"takes no request body" in answer or b"at most 2097152 bytes" in answer
    assert httpx.get(f"{server.url}/readyz").status_code == 200  # the drain route never acted


def test_an_empty_body_to_a_route_that_takes_none_passes(server: Server) -> None:
    # A chunked body that turns out empty is no body (then the route answers: an unknown sequence's 404).
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/sequences/none/range?count=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        )
        status, body = read_response(sock)
    assert status == 404 and b"none" in body, body


@pytest.mark.parametrize("size", [3 * MB, 10 * MB])  # 10 MB: more than the kernel's buffers take at once
@pytest.mark.parametrize("path", ["/v1/decode", "/v1/admin/drain"])
def test_a_client_that_writes_its_whole_body_before_reading_still_reads_its_413(
    server: Server, path: str, size: int
) -> None:
    # urllib sends the body whole, then reads: the server answers early, and must not reset the connection under it
    # (closing a socket with unread bytes does: the client then sees a broken pipe, not its 413).
    request = urllib.request.Request(
        f"{server.url}{path}", data=b"x" * size, method="POST", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 413
    assert b"at most 2097152 bytes" in refused.value.read()
    assert httpx.get(f"{server.url}/readyz").status_code == 200


@pytest.mark.parametrize(
    ("request_bytes", "status", "words"),
    [
        (b"GET /healthz HTTP/1.1\r\n\r\n", 400, b"Host header"),
        (b"GET /v1/ids/wiji HTTP/1.1\r\n\r\n", 400, b"Host header"),
        (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, b"HTTP/2.0 is not supported"),
        (b"GET /v1/ids/wiji HTTP/2.0\r\nHost: x\r\n\r\n", 505, b"HTTP/2.0 is not supported"),
        (b"GET /v1/ids/wiji HTTP/0.9\r\nHost: x\r\n\r\n", 505, b"HTTP/0.9 is not supported"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n", 417, b"200-ok"),
        (b"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n", 417, b"200-ok"),
        (b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}", 417, b"200-ok"),
        (b"GET /v1/ids/wiji HTTP/9.9\r\nHost: x\r\n\r\n", 505, b"not supported"),
        (b"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n", 400, b"invalid HTTP request"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, b"one Host header, got 2"),
        (b"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n", 400, b"one Host header, got 2"),
        (b"GET /v1/ids/wiji HTTP/1.0\r\nHost: x\r\nHost: y\r\n\r\n", 400, b"one Host header, got 2"),
        (b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n", 501, b"'xchunked'"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, b"must be chunked"),
        (b"GET http://x HTTP/1.1\r\nHost: x\r\n\r\n", 400, b"request target must be a path"),
        (b"GET http://x?count=2 HTTP/1.1\r\nHost: x\r\n\r\n", 400, b"request target must be a path"),
    ],
)
def test_requests_without_host_of_another_version_or_expecting_more_are_refused(
    server: Server, request_bytes: bytes, status: int, words: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request_bytes)
        got, body = read_response(sock)
    assert got == status and words in body, body
