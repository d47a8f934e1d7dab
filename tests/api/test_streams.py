"""Streams under hostile clients, against a real ``idmint serve``: aborted streams stop within a chunk, options and
count are checked before the first byte, the node caps concurrent streams, a stream's duration at its scheme's cap is
checked up front, and a capacity-capped generator serves single requests ahead of streams."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.api.streams import StreamSlots
from app.errors import TooManyRequestsError
from app.issuing.issuer import STREAM_SLICE_S, no_charge
from app.schemes import get_scheme
from tests.helpers import new_node, started
from tests.support.raw_http import exchange
from tests.support.server import Server

MB = 1024 * 1024

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    replica = Server(tmp_path_factory.mktemp("streams"), {"IDMINT_MAX_CONCURRENT_STREAMS": "64"})
    try:
        replica.wait("/readyz")
        yield replica
    finally:
        replica.stop()


def issued_total(replica: Server, scheme: str) -> float:
    text = httpx.get(f"{replica.url}/metrics", timeout=60).text
    match = re.search(rf'^idmint_ids_issued_total{{scheme="{scheme}"}} (\S+)$', text, re.M)
    assert match, text[:2000]
    return float(match.group(1))


def finished_streams(replica: Server) -> float:
    """Stream requests the server has finished (``idmint_requests_total`` counts a request once it ended)."""
    text = httpx.get(f"{replica.url}/metrics", timeout=60).text
    pattern = r'^idmint_requests_total\{method="GET",route="/v1/ids/\{scheme\}/stream",status="200"\} (\S+)$'
    return sum(float(found) for found in re.findall(pattern, text, re.M))


def open_stream(port: int, path: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def test_fifty_aborted_streams_stop_within_a_chunk(server: Server) -> None:
    ended_before = finished_streams(server)
    socks = [open_stream(server.port, "/v1/ids/wiji/stream?count=100000000") for _ in range(50)]
    for sock in socks:
        got = 0
        while got < MB:
            got += len(sock.recv(65536))
    for sock in socks:
        sock.close()
    assert httpx.get(f"{server.url}/healthz", timeout=60).status_code == 200
    # Every stream has seen its client go and ended (a condition: a loaded machine ends them later, not differently).
    deadline = time.monotonic() + 60
    while finished_streams(server) < ended_before + 50:
        assert time.monotonic() < deadline, "not within 60 s: the 50 aborted streams ended"
        time.sleep(0.05)
    first = issued_total(server, "wiji")
    time.sleep(1.0)
    # Nothing is generated for clients that are gone (each could have finished at most its current chunk).
    assert issued_total(server, "wiji") == first
    assert first < 50 * 100_000_000 / 10


async def test_a_stream_served_by_the_connection_layer_sees_its_client_go_without_asking_starlette(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under app.serving's protocol a stream reads its request cycle's disconnect between chunks, never Starlette's
    costly ``Request.is_disconnected``; a client that pipelines a request behind its stream and closes ends the
    stream (the cycle under way, not only the last one parsed, is marked gone) and frees its slot."""
    import uvicorn
    from starlette.requests import Request

    from app.main import create_app
    from app.serving import BoundedHttpToolsProtocol
    from tests.helpers import make_settings

    asked: list[Request] = []

    async def recorded(self: Request) -> bool:
        asked.append(self)
        return False

    monkeypatch.setattr(Request, "is_disconnected", recorded)
    app = create_app(make_settings(tmp_path))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, http=BoundedHttpToolsProtocol, log_level="warning")
    server = uvicorn.Server(config)
    serving = asyncio.ensure_future(server.serve())
    try:
        while not server.started:
            assert not serving.done(), "the server did not start"
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        slots = app.app.state.streams  # Front -> FastAPI
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/ids/wiji/stream?count=100000000 HTTP/1.1\r\nHost: x\r\n\r\n")
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        got = 0
        while got < MB:
            got += len(await reader.read(65536))
        assert slots.active == 1
        writer.close()
        deadline = time.monotonic() + 60
        while slots.active:
            assert time.monotonic() < deadline, "the stream ran on after its client went"
            await asyncio.sleep(0.01)
        assert asked == []
    finally:
        server.should_exit = True
        await serving


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/v1/ids/siq/stream?type=bogus&count=1000", "bogus"),
        ("/v1/ids/wiji/stream?count=0", "count"),
        ("/v1/ids/wiji/stream?count=100000001", "count"),
        ("/v1/ids/wiji/stream?mode=spread", "mode"),
        ("/v1/ids/hlc-ulid/stream?count=10&after=7ZZZZZZZZZ0000000000000000", "after"),
    ],
)
def test_stream_options_are_refused_before_the_first_byte(server: Server, path: str, fragment: str) -> None:
    r = httpx.get(f"{server.url}{path}")
    assert r.status_code == 422, r.text[:200]
    assert r.headers["content-type"] == "application/json"
    assert fragment in r.json()["detail"]


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_stream_asked_over_http_1_0_is_a_426_naming_http_1_1_and_a_batch_is_served(
    server: Server, method: str
) -> None:
    """HTTP/1.0 has no chunked transfer coding: a stream sent chunked to a 1.0 client reads its chunk sizes as IDs
    (uvicorn answered so), and one sent to the close cannot tell a complete stream from a cut one. Refused before
    its first byte, with ``Upgrade: HTTP/1.1``; a batch over HTTP/1.0 is answered as usual."""
    body = b"" if method == "GET" else b"Content-Length: 0\r\n"
    (refused,) = exchange(
        server.port, f"{method} /v1/ids/wiji/stream?count=5 HTTP/1.0\r\n".encode() + body + b"\r\n", [method]
    )
    assert refused.status == 426, refused.raw[:300]
    assert refused.headers["upgrade"] == "HTTP/1.1" and b"\r\nconnection: upgrade" in refused.head.lower()
    assert "HTTP/1.1" in json.loads(refused.body)["detail"]
    assert b"transfer-encoding" not in refused.head.lower()
    (batch,) = exchange(server.port, b"GET /v1/ids/wiji?count=5 HTTP/1.0\r\n\r\n")
    assert batch.status == 200 and len(json.loads(batch.body)["ids"]) == 5


def test_a_stream_longer_than_max_stream_seconds_at_the_cap_is_refused_with_the_figure(server: Server) -> None:
    r = httpx.get(f"{server.url}/v1/ids/eight-byte/stream?count=100000000")
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "1562 s" in detail or "1563 s" in detail, detail  # 100,000,000 at 64,000 IDs/s (one generator ID)
    assert "IDMINT_MAX_STREAM_SECONDS" in detail and "64,000 IDs/s" in detail
    ok = httpx.get(f"{server.url}/v1/ids/eight-byte/stream?count=100000")
    assert ok.status_code == 200 and ok.content.count(b"\n") == 100000


@pytest.mark.integration
def test_the_node_caps_concurrent_streams_with_429(tmp_path: Path) -> None:
    replica = Server(tmp_path, {"IDMINT_MAX_CONCURRENT_STREAMS": "2"})
    try:
        replica.wait("/readyz")
        held = [open_stream(replica.port, "/v1/ids/wiji/stream?count=100000000") for _ in range(2)]
        for sock in held:
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        r = httpx.get(f"{replica.url}/v1/ids/wiji/stream?count=10")
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "streams" in r.json()["detail"]
        assert httpx.get(f"{replica.url}/v1/ids/wiji?count=10").status_code == 200  # other routes unaffected
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 10
        while httpx.get(f"{replica.url}/v1/ids/wiji/stream?count=10").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        replica.stop()


async def test_streams_yield_a_capped_generator_to_single_requests(tmp_path: Path) -> None:
    """Four eight-byte streams want every slot of every millisecond; single requests still get theirs at the next
    millisecond or the one after (the stream chunks defer to them), not after a queue of stream slices. The
    streams take what accrued once per slice of the lookback (STREAM_SLICE_S), not once per millisecond each."""
    from app.api.streams import lines as issue_lines

    async with started(new_node(tmp_path)) as node:  # the real clock: lags are measured against time.time_ns()
        issuer = node.issuers["eight-byte"]
        scheme = get_scheme("eight-byte")
        stop = asyncio.Event()
        streamed = [0]

        async def stream() -> None:
            async for chunk in issue_lines(issuer, 10_000_000, "hex", {}, charge=no_charge):
                streamed[0] += chunk.count(b"\n")
                await asyncio.sleep(0)
                if stop.is_set():
                    return

        tasks = [asyncio.create_task(stream()) for _ in range(4)]
        try:
            await asyncio.sleep(0.3)
            gen = issuer.generator
            assert gen is not None
            takes_before, t0 = gen.stats.sequence_exhausted, time.monotonic()
            lags = []
            for _ in range(100):
                asked_ms = time.time_ns() // 1_000_000
                issued = await issuer.issue(1, {}, charge=no_charge)
                lags.append(scheme.fields(issued.values()[0])["timestamp_ms"] - asked_ms)
                await asyncio.sleep(0.003)
            takes_per_s = (gen.stats.sequence_exhausted - takes_before) / (time.monotonic() - t0)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
    assert streamed[0] > 64 * 300  # the streams were really running at the cap meanwhile
    print(f"partial takes per second: {takes_per_s:.0f}")
    assert takes_per_s < 4 * 2 / STREAM_SLICE_S, takes_per_s  # one per slice per stream, plus slack (per ms: 4,000)
    lags.sort()
    assert lags[50] <= 2 and lags[90] <= 5, lags


@pytest.mark.integration
def test_a_snowflake_stream_is_sized_and_bounded_by_its_layouts_cap(tmp_path: Path) -> None:
    """Sonyflake: 256 IDs per 10 ms unit = 25,600 IDs/s per worker ID. A stream that would take longer than
    IDMINT_MAX_STREAM_SECONDS at that cap is refused up front, like eight-byte's; a shorter one completes."""
    replica = Server(tmp_path, {"IDMINT_SNOWFLAKE_LAYOUT": "sonyflake"})
    try:
        replica.wait("/readyz")
        r = httpx.get(f"{replica.url}/v1/ids/snowflake/stream?count=100000000")
        assert r.status_code == 422, r.text[:200]
        detail = r.json()["detail"]
        assert "3906 s" in detail and "25,600 IDs/s" in detail and "IDMINT_MAX_STREAM_SECONDS" in detail, detail
        ok = httpx.get(f"{replica.url}/v1/ids/snowflake/stream?count=30000", timeout=60)
        assert ok.status_code == 200 and ok.content.count(b"\n") == 30000
    finally:
        replica.stop()


def test_the_429_retry_after_is_the_soonest_expected_end_of_a_running_stream() -> None:
    now = [100.0]
    slots = StreamSlots(2, max_seconds=300.0, send_timeout=30.0, clock=lambda: now[0])
    steady, stalled = slots.take(1000), slots.take(1_000_000)
    steady.sent = 250  # a quarter in 1 s: 3 s to go
    stalled.sent = 10
    now[0] += 1.0
    steady.progressed = now[0]
    with pytest.raises(TooManyRequestsError) as full:
        slots.take(10)
    assert full.value.retry_after == 3
    now[0] += 10.0  # neither moved since: both stalled, dropped 30 s after their last piece (at 100 s and 101 s)
    with pytest.raises(TooManyRequestsError) as full:
        slots.take(10)
    assert full.value.retry_after == 19
    slots.give_back(steady)
    slots.take(10)  # a slot was free
