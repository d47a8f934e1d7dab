"""The connection layer answers as the ASGI front does: each request goes to two real servers of the same
settings, ``idmint serve`` (app/serving.py answers a simple GET of a hot route itself) and the same app under
uvicorn's own httptools protocol (every request through ASGI to app/api/front.py), and the two answers must be the
same bytes but for the IDs, the lengths they make, and the date. Covered: every scheme and format, counts up to
IDMINT_MAX_COUNT (past the size encoded in a worker thread, so the connection layer's waiting path too), sequence
``next``, every refusal (401, 403, 404, 422, 429, 503 while draining and while not ready) and the framing refusals
(400 without Host, 505, 417), over HTTP/1.1 and HTTP/1.0, kept alive or closed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from app.api.issuing import THREAD_ENCODE_MIN
from tests.api.test_auth import entry, key_file
from tests.support.raw_http import RawResponse, exchange
from tests.support.server import Server

MAX_COUNT = THREAD_ENCODE_MIN + 1000
FULL, DECODER, SLOW = "k-full", "k-decoder", "k-slow"
SLOW_RATE = 1 / 2.999
"""k-slow's requests per second: a second request within a second of the first waits 3 s (Retry-After: 3)."""


class Pair(NamedTuple):
    here: Server
    """``idmint serve``: the connection layer."""
    asgi: Server
    """The same app under uvicorn's httptools protocol: ASGI only."""


def start_pair(tmp: Path, env: dict[str, str]) -> Pair:
    here = Server(tmp / "here", env)
    asgi = Server(tmp / "asgi", env, "--http", "httptools", "--no-server-header", uvicorn=True)
    try:
        for replica in (here, asgi):
            replica.wait("/healthz")
    except BaseException:
        here.stop()
        asgi.stop()
        raise
    return Pair(here, asgi)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("equivalence")
    keys = key_file(
        tmp / "keys.toml",
        entry(FULL, FULL, ["issue", "stream", "sequences", "admin", "decode"]),
        entry(DECODER, DECODER, ["decode"]),
        entry(SLOW, SLOW, ["issue"], requests_per_second=SLOW_RATE),
    )
    pair = start_pair(tmp, {"IDMINT_API_KEYS_FILE": str(keys), "IDMINT_MAX_COUNT": str(MAX_COUNT)})
    try:
        for replica in pair:
            replica.wait_ready()
        yield pair
    finally:
        for replica in pair:
            replica.stop()


def request(target: str, key: str | None = FULL, version: str = "1.1", extra: str = "") -> bytes:
    head = f"GET {target} HTTP/{version}\r\n"
    if version == "1.1":
        head += "Host: idmint.test\r\n"
    if key is not None:
        head += f"Authorization: Bearer {key}\r\n"
    return (head + extra + "\r\n").encode()


def masked(answer: RawResponse) -> bytes:
    """The answer's bytes with its date, its length and its IDs masked (after checking the length is the body's)."""
    assert int(answer.headers["content-length"]) == len(answer.body), answer.head
    head = re.sub(rb"(?m)^date: [^\r]*", b"date: *", answer.head)
    head = re.sub(rb"(?m)^content-length: \d+", b"content-length: *", head)
    body = re.sub(rb'"ids":\[[^\]]*\]', b'"ids":[*]', answer.body)
    body = re.sub(rb'"bundle":"[^"]*"', b'"bundle":"*"', body)
    return head + b"\r\n\r\n" + body


def both(pair: Pair, data: bytes, count: int = 1) -> tuple[list[RawResponse], list[RawResponse]]:
    return exchange(pair.here.port, data, count=count), exchange(pair.asgi.port, data, count=count)


def assert_same(pair: Pair, data: bytes, status: int, count: int = 1) -> list[RawResponse]:
    here, asgi = both(pair, data, count)
    for a, b in zip(here, asgi, strict=True):
        assert a.status == status, a.raw[:600]
        assert masked(a) == masked(b)
    return here


def schemes(replica: Server) -> dict[str, list[str]]:
    return {s["name"]: s["formats"] for s in replica.get_json("/v1/schemes")["schemes"]}


def test_every_scheme_and_format_answers_the_same(server: Pair) -> None:
    catalogue = schemes(server.here)
    assert catalogue == schemes(server.asgi) and len(catalogue) >= 10
    for scheme, formats in catalogue.items():
        for fmt in formats:
            for count in (1, 3):
                [answer] = assert_same(server, request(f"/v1/ids/{scheme}?count={count}&format={fmt}"), 200)
                assert len(json.loads(answer.body)["ids"]) == count
        [answer] = assert_same(server, request(f"/v1/ids/{scheme}"), 200)
        assert answer.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("count", [1000, THREAD_ENCODE_MIN, MAX_COUNT])
@pytest.mark.parametrize("scheme", ["wiji", "uuidv7", "eight-byte", "muid"])
def test_batches_up_to_the_largest_count_answer_the_same(server: Pair, scheme: str, count: int) -> None:
    [answer] = assert_same(server, request(f"/v1/ids/{scheme}?count={count}"), 200)
    assert len(json.loads(answer.body)["ids"]) == count


@pytest.mark.parametrize(
    ("version", "extra"),
    [("1.0", ""), ("1.0", "Connection: keep-alive\r\n"), ("1.1", "Connection: close\r\n"), ("1.1", "")],
    ids=["1.0", "1.0-keep-alive", "1.1-close", "1.1"],
)
def test_versions_and_connection_headers_answer_the_same(server: Pair, version: str, extra: str) -> None:
    for target in ("/v1/ids/wiji", "/v1/ids/wiji?count=0", f"/v1/ids/wiji?count={THREAD_ENCODE_MIN}"):
        [answer] = assert_same(server, request(target, version=version, extra=extra), 422 if "=0" in target else 200)
        closes = version == "1.0" or "close" in extra
        assert ("connection" in answer.headers) is closes, answer.head


@pytest.mark.parametrize(
    ("target", "status"),
    [
        ("/v1/ids/w%69ji?count=2", 200),
        ("/v1%2Fids/wiji", 200),
        ("http://elsewhere.test/v1/ids/wiji?count=2", 200),
        ("/v1/ids/wiji?count=2#fragment", 200),
        ("/v1/ids/wiji%3Fcount=2", 404),
        ("/v1/ids/%F0%9F%A6%84", 404),
        ("//v1/ids/wiji", 404),
        ("/v1/ids/wiji/", 307),  # Starlette redirects to the path without the slash
        ("/v1/ids/wiji?count=%32", 200),
        ("/v1/ids/wiji?count=2&format=hex&", 200),
    ],
)
def test_odd_targets_answer_the_same(server: Pair, target: str, status: int) -> None:
    assert_same(server, request(target), status)


def test_pipelined_requests_answer_the_same(server: Pair) -> None:
    targets = ("/v1/ids/wiji", f"/v1/ids/uuidv7?count={THREAD_ENCODE_MIN}", "/healthz", "/v1/ids/nope", "/v1/ids/ulid")
    here, asgi = both(server, b"".join(request(target) for target in targets), count=len(targets))
    assert [r.status for r in here] == [r.status for r in asgi] == [200, 200, 200, 404, 200]
    assert [masked(r) for r in here] == [masked(r) for r in asgi]


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (request("/v1/ids/wiji", key=None), 401),
        (request("/v1/ids/wiji", key="not-a-key"), 401),
        (request("/v1/ids/wiji", key=None, extra="Authorization: Basic eDp5\r\n"), 401),
        (request("/v1/ids/wiji", key=DECODER), 403),
        (request("/v1/ids/nope"), 404),
        (request("/v1/sequences/none/next"), 404),
        (request("/v1/ids/wiji?count=0"), 422),
        (request("/v1/ids/wiji?count=%C2%B2"), 422),
        (request(f"/v1/ids/wiji?count={MAX_COUNT + 1}"), 422),
        (request("/v1/ids/wiji?format=nope"), 422),
        (request("/v1/ids/wiji?count=1&count=2"), 422),
        (request("/v1/ids/wiji?prefix=x"), 422),
        (request("/v1/ids/hlc-ulid?after=zzz"), 422),
        (request("/v1/sequences/x/next?count=0"), 422),
        (request("/v1/ids/wiji", version="1.1", key=FULL).replace(b"Host: idmint.test\r\n", b""), 400),
        (request("/v1/ids/wiji", version="2.0"), 505),
        (request("/v1/ids/wiji", version="0.9"), 505),
        (request("/v1/ids/wiji", extra="Expect: 200-ok\r\n"), 417),
        (request("/v1/ids/wiji", extra="Content-Length: 5\r\n") + b"hello", 422),
        (request("/v1/ids/wiji", extra="Content-Length: 99999999\r\n"), 413),
    ],
    ids=lambda v: str(v)[:60] if isinstance(v, bytes) else str(v),
)
def test_refusals_answer_the_same(server: Pair, data: bytes, status: int) -> None:
    [answer] = assert_same(server, data, status)
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["cache-control"] == "no-store"  # a route that hands out IDs: its refusals too


def test_a_request_over_its_keys_quota_answers_the_same(server: Pair) -> None:
    here, asgi = both(server, request("/v1/ids/wiji", key=SLOW) * 2, count=2)
    assert [r.status for r in here] == [r.status for r in asgi] == [200, 429]
    assert here[1].headers["retry-after"] == asgi[1].headers["retry-after"] == "3"
    assert [masked(r) for r in here] == [masked(r) for r in asgi]


def test_sequence_next_answers_the_same_integers(server: Pair) -> None:
    create = b"POST /v1/sequences HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
    body = b'{"name": "orders"}'
    data = create % FULL.encode() + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    for replica in server:
        [created] = exchange(replica.port, data)
        assert created.status == 201, created.raw
    for target in ("/v1/sequences/orders/next?count=3", "/v1/sequences/orders/next?count=2&format=string"):
        here, asgi = both(server, request(target))
        assert here[0].status == 200 and here[0].raw.split(b"\r\n\r\n")[1] == asgi[0].raw.split(b"\r\n\r\n")[1]
        assert masked(here[0]) == masked(asgi[0])
        assert here[0].headers["cache-control"] == "no-store"


def test_not_ready_and_draining_answer_the_same(tmp_path: Path) -> None:
    # A snowflake layout whose time ran out (2**40 ms from 1970): snowflake alone is not ready, with a fixed
    # Retry-After; no key file, so the public path is compared too.
    pair = start_pair(tmp_path, {"IDMINT_SNOWFLAKE_LAYOUT": "custom:0:1:40/11/12", "IDMINT_SNOWFLAKE_WORKER_ID": "1"})
    try:
        for scheme in ("wiji", "uuidv7"):
            assert_same(pair, request(f"/v1/ids/{scheme}", key=None), 200)
        [answer] = assert_same(pair, request("/v1/ids/snowflake", key=None), 503)
        assert "ran out of time" in answer.body.decode() and answer.headers["retry-after"] == "3600"
        for replica in pair:
            [drained] = exchange(replica.port, b"POST /v1/admin/drain HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            assert drained.status == 200, drained.raw
        for target in ("/v1/ids/wiji", "/v1/ids/snowflake", "/v1/sequences/orders/next"):
            [answer] = assert_same(pair, request(target, key=None), 503)
            assert answer.headers["retry-after"] == "5" and b"draining" in answer.body
    finally:
        for replica in pair:
            replica.stop()
