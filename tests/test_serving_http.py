"""HTTP/1.1 as the connection layer (app/serving.py) speaks it, against a real ``idmint serve``: pipelined requests
mixing the routes it answers itself with those it hands to ASGI, HEAD, HTTP/1.0, ``Connection: close`` and
keep-alive, chunked and ``Expect: 100-continue`` requests, %-encoded and absolute-form targets, clients that stop
reading; API keys, quotas and the metrics charged exactly once per request whichever way it went. In-process, with
a recording transport: a hot answer is one write, made inside the read callback (no task)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from app.api.issuing import THREAD_ENCODE_MIN
from app.main import create_app
from app.serving import ANSWERS_PER_READ, BoundedHttpToolsProtocol
from tests.api.test_auth import entry, key_file
from tests.helpers import make_settings
from tests.support.raw_http import Reader, RecordingTransport, connect, exchange
from tests.support.server import Server

METERED, TINY, TINY_TOO = "k-metered", "k-tiny", "k-tiny-too"
DEADLINE_S = 60.0
BIG = THREAD_ENCODE_MIN + 100
"""A batch encoded in a worker thread: the connection layer's answer waits for it (a task carries it on)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serving-http")
    keys = key_file(
        tmp / "keys.toml",
        entry(METERED, METERED, ["issue", "stream", "sequences"], requests_per_second=100_000, ids_per_second=1e9),
        entry(TINY, TINY, ["issue"], ids_per_second=10),
        entry(TINY_TOO, TINY_TOO, ["issue"], ids_per_second=10),
    )
    replica = Server(
        tmp,
        {
            "IDMINT_API_KEYS_FILE": str(keys),
            "IDMINT_PUBLIC_SCOPES": "issue,stream,decode,sequences,admin,metrics",
            "IDMINT_STREAM_SEND_TIMEOUT": "1",
        },
    )
    try:
        replica.wait_ready()
        created = httpx.post(f"{replica.url}/v1/sequences", json={"name": "orders"})
        assert created.status_code in (200, 201), created.text
        yield replica
    finally:
        replica.stop()


def get(target: str, *headers: str, method: str = "GET", version: str = "1.1", body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/{version}", "Host: idmint.test", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def ids_of(body: bytes) -> list[Any]:
    return list(json.loads(body)["ids"])


def sample(metrics: str, name: str, **labels: str) -> float:
    """One sample of the Prometheus text ``metrics`` (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in metrics.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            series, _, value = line.rpartition(" ")
            found = series[len(name) :].strip("{}")
            if ",".join(sorted(found.split(","))) == wanted or (not labels and not found):
                return float(value)
    return 0.0


def test_pipelined_requests_mixing_hot_and_other_routes_answer_in_order(server: Server) -> None:
    body = b'{"count": 2}'
    requests = [
        (get("/v1/ids/wiji"), "GET"),
        (get("/healthz"), "GET"),
        (get(f"/v1/ids/uuidv7?count={BIG}"), "GET"),  # waits for its encoding: those behind it queue
        (get("/v1/ids/ulid"), "GET"),
        (
            get("/v1/ids/ksuid", "Content-Type: application/json", f"Content-Length: {len(body)}", method="POST")
            + body,
            "POST",
        ),
        (get("/v1/ids/typeid/stream?count=3"), "GET"),
        (get("/v1/ids/wiji", method="HEAD"), "HEAD"),
        (get("/v1/sequences/orders/next?count=2"), "GET"),
        (get("/v1/ids/nope"), "GET"),
        (get("/v1/ids/siq?count=2"), "GET"),
    ]
    with connect(server.port) as sock:
        sock.sendall(b"".join(data for data, _ in requests))
        reader = Reader(sock)
        answers = [reader.response(method) for _, method in requests]
    assert [a.status for a in answers] == [200, 200, 200, 200, 200, 200, 200, 200, 404, 200]
    assert json.loads(answers[0].body)["scheme"] == "wiji"
    assert answers[1].body == b'{"status":"ok"}'
    assert json.loads(answers[2].body)["scheme"] == "uuidv7" and len(ids_of(answers[2].body)) == BIG
    assert json.loads(answers[3].body)["scheme"] == "ulid"
    assert json.loads(answers[4].body)["scheme"] == "ksuid" and len(ids_of(answers[4].body)) == 2
    assert answers[5].headers["transfer-encoding"] == "chunked" and len(answers[5].body.split()) == 3
    assert answers[6].body == b""
    first, second = ids_of(answers[7].body)
    assert second == first + 1
    assert json.loads(answers[9].body)["scheme"] == "siq" and len(ids_of(answers[9].body)) == 2
    # Every answer that hands out IDs says no cache may keep it (a replayed one would hand the same IDs out twice):
    # single and batch, GET and POST, stream, sequence next, and their refusals; none other.
    stored = [answer.headers.get("cache-control") for answer in answers]
    assert (
        stored
        == ["no-store", None, "no-store", "no-store", "no-store", "no-store", "no-store", "no-store"] + ["no-store"] * 2
    )


def test_sequence_ranges_and_streams_say_no_store_and_health_does_not(server: Server) -> None:
    ranged = httpx.post(f"{server.url}/v1/sequences/orders/range?count=5")
    assert ranged.status_code == 200 and ranged.headers["cache-control"] == "no-store"
    with httpx.stream("GET", f"{server.url}/v1/ids/ulid/stream?count=5") as streamed:
        assert streamed.status_code == 200 and streamed.headers["cache-control"] == "no-store"
    assert "cache-control" not in httpx.get(f"{server.url}/readyz").headers


def test_http_1_0_is_answered_then_closed(server: Server) -> None:
    with connect(server.port) as sock:
        sock.sendall(get("/v1/ids/wiji", version="1.0") + get("/v1/ids/wiji", version="1.0"))
        reader = Reader(sock)
        answer = reader.response()
        assert answer.status == 200 and answer.headers["connection"] == "close"
        assert reader.closed_by_server()  # the second request is never answered: 1.0 keeps nothing alive


def test_keep_alive_serves_many_then_connection_close_ends_it(server: Server) -> None:
    with connect(server.port) as sock:
        reader = Reader(sock)
        seen = set()
        for _ in range(20):
            sock.sendall(get("/v1/ids/wiji"))
            answer = reader.response()
            assert answer.status == 200 and "connection" not in answer.headers
            seen.update(ids_of(answer.body))
        sock.sendall(get("/v1/ids/wiji", "Connection: close"))
        answer = reader.response()
        assert answer.status == 200 and answer.headers["connection"] == "close"
        assert reader.closed_by_server()
    assert len(seen) == 20


def test_chunked_requests(server: Server) -> None:
    empty, filled = b"0\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n"
    [answer] = exchange(server.port, get("/v1/ids/wiji?count=2", "Transfer-Encoding: chunked", body=empty))
    assert answer.status == 200 and len(ids_of(answer.body)) == 2  # an empty body: no body
    [answer] = exchange(server.port, get("/v1/ids/wiji", "Transfer-Encoding: chunked", body=filled))
    assert answer.status == 422 and "takes no request body" in answer.body.decode()
    body = b'{"count": 3}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    [answer] = exchange(
        server.port,
        get(
            "/v1/ids/wiji", "Transfer-Encoding: chunked", "Content-Type: application/json", method="POST", body=chunked
        ),
    )
    assert answer.status == 200 and len(ids_of(answer.body)) == 3


def test_expect_100_continue(server: Server) -> None:
    # A GET takes no body: it is answered at once, with no interim 100.
    [answer] = exchange(server.port, get("/v1/ids/wiji?count=2", "Expect: 100-continue"))
    assert answer.status == 200 and not answer.interim and len(ids_of(answer.body)) == 2
    # A POST waits for the 100 before it sends its body.
    body = b'{"count": 4}'
    head = get("/v1/ids/wiji", "Expect: 100-continue", "Content-Type: application/json", f"Content-Length: {len(body)}")
    with connect(server.port) as sock:
        sock.sendall(head.replace(b"GET ", b"POST ", 1))
        reader = Reader(sock)
        assert reader._take_until(b"\r\n\r\n").startswith(b"HTTP/1.1 100 ")
        sock.sendall(body)
        answer = reader.response()
    assert answer.status == 200 and len(ids_of(answer.body)) == 4


def test_upgrade_requests_go_to_uvicorn(server: Server) -> None:
    # A websocket upgrade is uvicorn's websocket protocol's (no route takes one: 403); any other is ignored.
    websocket = ("Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13")
    [answer] = exchange(server.port, get("/v1/ids/wiji", *websocket, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="))
    assert answer.status == 403
    [answer] = exchange(server.port, get("/v1/ids/wiji?count=2", "Connection: Upgrade", "Upgrade: h2c"))
    assert answer.status == 200 and len(ids_of(answer.body)) == 2
    assert "Traceback" not in server.log()


@pytest.mark.parametrize(
    "target",
    ["/v1/ids/w%69ji?count=2", "/v1%2Fids/wiji?count=2", "http://elsewhere.test/v1/ids/wiji?count=2"],
)
def test_percent_encoded_and_absolute_form_targets(server: Server, target: str) -> None:
    [answer] = exchange(server.port, get(target))
    assert answer.status == 200
    assert json.loads(answer.body)["scheme"] == "wiji" and len(ids_of(answer.body)) == 2


def paths(metrics: str) -> dict[str, float]:
    out = {}
    for line in metrics.splitlines():
        match = re.match(r'idmint_requests_total\{method="GET",route="/v1/ids/\{scheme\}",status="(\d+)"\} (\S+)', line)
        if match:
            out[match.group(1)] = float(match.group(2))
    return out


def test_keys_quotas_and_metrics_count_each_request_once_on_either_transport(server: Server) -> None:
    auth = f"Authorization: Bearer {METERED}"
    before = server.metrics_text()
    # The connection layer (at once, and waiting for a batch encoded in a thread), then ASGI (a Content-Length: 0
    # sends it there), each answered over one kept-alive connection.
    requests = [get("/v1/ids/wiji?count=3", auth)] * 5
    requests += [get(f"/v1/ids/wiji?count={BIG}", auth)] * 2
    requests += [get("/v1/ids/wiji?count=3", auth, "Content-Length: 0")] * 4
    requests += [get("/v1/ids/wiji?count=0", auth), get("/v1/ids/wiji?count=0", auth, "Content-Length: 0")]
    with connect(server.port) as sock:
        reader = Reader(sock)
        for data in requests:
            sock.sendall(data)
            reader.response()
    after = server.metrics_text()

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("idmint_api_key_requests_total", key=METERED, outcome="allowed") == len(requests)
    assert delta("idmint_api_key_ids_total", key=METERED) == 9 * 3 + 2 * BIG  # a refused count charges nothing
    assert delta("idmint_ids_issued_total", scheme="wiji") == 9 * 3 + 2 * BIG
    grown = {status: n - paths(before).get(status, 0) for status, n in paths(after).items()}
    grown = {status: n for status, n in grown.items() if n}
    assert grown == {"200": 11, "422": 2}
    # Over the IDs quota (10 a second): the second is refused, once, on either transport (a key each).
    for key, extra in ((TINY, ()), (TINY_TOO, ("Content-Length: 0",))):
        before = server.metrics_text()
        answers = exchange(
            server.port, get("/v1/ids/wiji?count=10", f"Authorization: Bearer {key}", *extra) * 2, count=2
        )
        assert [a.status for a in answers] == [200, 429], answers[1].body
        after = server.metrics_text()
        assert delta("idmint_api_key_requests_total", key=key, outcome="allowed") == 1  # the refusal counted once
        assert delta("idmint_api_key_requests_total", key=key, outcome="over_quota") == 1
        assert delta("idmint_api_key_ids_total", key=key) == 10


@pytest.mark.anyio
async def test_a_hot_answer_is_one_write_inside_the_read_callback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No access log (as idmint serve runs by default): uvicorn's access logger has no handler to reach.
    monkeypatch.setattr(logging.getLogger("uvicorn.access"), "propagate", False)
    front = create_app(make_settings(tmp_path))
    async with front.app.router.lifespan_context(front.app):
        config = Config(front, log_config=None, server_header=False)
        config.load()
        state = ServerState()
        protocol = BoundedHttpToolsProtocol(config=config, server_state=state, app_state={})
        transport = RecordingTransport()
        protocol.connection_made(transport)
        protocol.data_received(
            get("/v1/ids/wiji") + get("/v1/ids/uuidv7?count=2") + get("/v1/ids/ulid", "Connection: close")
        )
        # Answered before data_received returned: no task, one write each, in order, the last closing.
        assert not state.tasks
        assert [w.split(b"\r\n\r\n")[1].split(b'"')[3] for w in transport.writes] == [b"wiji", b"uuidv7", b"ulid"]
        assert all(w.startswith(b"HTTP/1.1 200 OK\r\n") for w in transport.writes)
        assert transport.closing and b"\r\nconnection: close\r\n" in transport.writes[2]
        # Pipelined past ANSWERS_PER_READ in one read: the rest wait their turn through ASGI, in order.
        protocol = BoundedHttpToolsProtocol(config=config, server_state=state, app_state={})
        transport = RecordingTransport()
        protocol.connection_made(transport)
        protocol.data_received(get("/v1/ids/wiji") * (ANSWERS_PER_READ + 8))
        assert len(transport.writes) == ANSWERS_PER_READ and state.tasks
        while state.tasks:  # each starts the next when it ends
            await asyncio.gather(*state.tasks)
        assert len([w for w in transport.writes if w.startswith(b"HTTP/1.1 200 OK")]) == ANSWERS_PER_READ + 8
        protocol.connection_lost(None)
        # A request through ASGI (a body) is a task writing head and body apart.
        protocol = BoundedHttpToolsProtocol(config=config, server_state=state, app_state={})
        transport = RecordingTransport()
        protocol.connection_made(transport)
        protocol.data_received(get("/v1/ids/wiji", "Content-Length: 0"))
        assert state.tasks and not transport.writes
        await asyncio.gather(*state.tasks)
        assert len(transport.writes) == 2 and transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
        protocol.connection_lost(None)


def server_closed(sock: socket.socket) -> bool:
    """Whether the server closed (FIN) or reset the connection, seen without reading from it (TCP_INFO's state:
    TCP_CLOSE 7, TCP_CLOSE_WAIT 8)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] in (7, 8)


def test_a_client_that_stops_reading_is_closed_and_others_are_served(server: Server) -> None:
    hog = socket.socket()
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.connect(("127.0.0.1", server.port))
    try:
        # Requests pipelined on and on, their answers never read: the connection layer answers until the client
        # takes no more bytes, then hands the rest to ASGI, which waits; the send timeout (1 s) ends it.
        hog.settimeout(0.2)
        padded = get("/v1/ids/wiji?count=50", "X-Pad: " + "p" * 4000)
        sent = 0
        with pytest.raises(OSError):  # the server stops reading: the kernel's buffers fill, sendall times out
            for _ in range(100_000):
                hog.sendall(padded)
                sent += 1
        assert sent > 10
        served = httpx.get(f"{server.url}/v1/ids/wiji", timeout=DEADLINE_S)
        assert served.status_code == 200
        deadline = time.monotonic() + DEADLINE_S
        while not server_closed(hog):
            assert time.monotonic() < deadline, "the server kept a client that reads nothing"
            time.sleep(0.05)
    finally:
        hog.close()
    assert "accepted no bytes" in server.log() and "Traceback" not in server.log()


def test_head_is_get_without_its_body_and_issues_nothing(server: Server) -> None:
    auth = f"Authorization: Bearer {TINY}"
    before = server.metrics_text()
    heads = [
        get("/healthz", method="HEAD"),
        get("/readyz", method="HEAD"),
        get("/v1/ids/wiji?count=5", auth, method="HEAD"),
        get(f"/v1/ids/wiji?count={BIG}", auth, method="HEAD"),
        get("/v1/sequences/orders/next?count=2", method="HEAD"),
        get("/v1/ids/wiji/stream?count=3", method="HEAD"),
        get("/v1/ids/wiji", "Authorization: Bearer nope", method="HEAD"),
    ]
    answers = exchange(server.port, b"".join(heads), methods=["HEAD"] * len(heads))
    assert [a.status for a in answers] == [200, 200, 200, 200, 200, 200, 401]
    gets = exchange(server.port, get("/healthz") + get("/readyz"), count=2)
    for head, full in zip(answers[:2], gets, strict=True):  # GET's headers, without the date
        assert head.headers.keys() == full.headers.keys() and head.headers["content-length"] == str(len(full.body))
    for answer in answers[2:6]:  # nothing issued: no length, not stored
        assert answer.headers["cache-control"] == "no-store" and "content-length" not in answer.headers
    assert answers[5].headers["content-type"].startswith("text/plain")
    assert answers[6].headers["content-length"] == str(
        len(exchange(server.port, get("/v1/ids/wiji", "Authorization: Bearer nope"))[0].body)
    )
    after = server.metrics_text()

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("idmint_ids_issued_total", scheme="wiji") == 0
    assert delta("idmint_api_key_ids_total", key=TINY) == 0  # nor charged to the key: its 10 IDs/s are still there
    assert delta("idmint_api_key_requests_total", key=TINY, outcome="allowed") == 2
    assert delta("idmint_requests_total", method="HEAD", route="/healthz", status="200") == 1
    nexts = get("/v1/sequences/orders/next") + get("/v1/sequences/orders/next", method="HEAD") * 3
    methods = ["GET"] + ["HEAD"] * 3 + ["GET"]
    first, _, _, _, second = exchange(server.port, nexts + get("/v1/sequences/orders/next"), methods)
    assert ids_of(second.body) == [ids_of(first.body)[0] + 1]  # HEAD drew no integer
    answer = exchange(server.port, get("/v1/ids/wiji?count=10", auth))[0]
    assert answer.status == 200, answer.body
    metered = f"Authorization: Bearer {METERED}"
    for path in ("/v1/ids/nope", "/v1/ids/nope/stream?count=3"):  # GET's 404, without its body
        (unknown,) = exchange(server.port, get(path, metered, method="HEAD"), methods=["HEAD"])
        (full,) = exchange(server.port, get(path, metered))
        assert unknown.status == full.status == 404 and unknown.body == b""
        assert unknown.headers["content-length"] == str(len(full.body))
