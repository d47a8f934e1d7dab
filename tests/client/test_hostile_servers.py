"""The client against servers (or proxies) that break their promises: 200 answers that are not IDs, and answers
dripped a byte at a time. Malformed answers are an error naming the server and the first bad line, nothing of
them is handed out, and the server is failed over like a dead one; a call's timeout is a deadline for the call."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from idmint_client import AsyncClient, Client, NoReplicaAvailableError
from idmint_client._replicas import retry_after_s

from tests.client.fakes import batch, catalogue, catalogue_answer, fake_id

pytestmark = pytest.mark.anyio

A, B = "http://a.invalid", "http://b.invalid"
TEXT = {"content-type": "text/plain; charset=us-ascii"}
HTML = "<!doctype html>\n<html><body>\n<h1>Welcome to our proxy</h1>\n</body></html>\n"

# (body of a 200 stream answer, content type, words the error must hold)
BAD_STREAMS = [
    ("", TEXT, "ended after 0 of"),
    ("\n\n\n", TEXT, "line 1 is not a wiji ID (base32): ''"),
    ("null\n", TEXT, "line 1 is not a wiji ID (base32): 'null'"),
    ("1\n2\n3\n", TEXT, "line 1 is not a wiji ID (base32): '1'"),
    (f"{fake_id('a', 1)}\nnot-an-id\n", TEXT, "line 2 is not a wiji ID (base32): 'not-an-id'"),
    (HTML, TEXT, "line 1 is not a wiji ID (base32): '<!doctype html>'"),
    (HTML, {"content-type": "text/html"}, "'text/html', not text/plain"),
]
LABEL = {"scheme": "wiji", "format": "base32"}
BAD_BATCHES = [
    ({**LABEL, "ids": ["", ""]}, "ID 1 is not a wiji ID (base32): ''"),
    ({**LABEL, "ids": [None, None]}, "ID 1 is not a wiji ID (base32): 'None'"),
    ({**LABEL, "ids": [1, 2]}, "ID 1 is not a wiji ID (base32): '1'"),
    ({**LABEL, "ids": [fake_id("a", 1), "<html>"]}, "ID 2 is not a wiji ID (base32): '<html>'"),
    ({"ids": [fake_id("a", 1), fake_id("a", 2)]}, "labelled scheme None format None, asked scheme 'wiji'"),
    ({"scheme": "ulid", "format": "ulid", "ids": [fake_id("a", 1), fake_id("a", 2)]}, "labelled scheme 'ulid'"),
    ({"scheme": "wiji", "format": "hex", "ids": [fake_id("a", 1), fake_id("a", 2)]}, "format 'hex', asked"),
]


def handler_of(bad_body: str, bad_type: dict[str, str], bad_json: object = None) -> httpx.MockTransport:
    """Replica a answers 200 with ``bad_body`` (streams) or ``bad_json`` (batches); replica b answers correctly
    (fresh IDs, numbered on from 0)."""
    issued = [0]

    def fresh(count: int) -> list[str]:
        issued[0] += count
        return [fake_id("b", i) for i in range(issued[0] - count, issued[0])]

    def handler(request: httpx.Request) -> httpx.Response:
        listed = catalogue_answer(request)
        if listed is not None:
            return listed
        count = int(request.url.params["count"])
        host = request.url.host
        if request.url.path.endswith("/stream"):
            if host == "a.invalid":
                return httpx.Response(200, text=bad_body, headers=bad_type)
            return httpx.Response(200, text="".join(f"{i}\n" for i in fresh(count)), headers=TEXT)
        if host == "a.invalid":
            return httpx.Response(200, json=bad_json)
        return httpx.Response(200, json=batch(request, fresh(count)))

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(("body", "kind", "words"), BAD_STREAMS)
def test_a_malformed_stream_yields_nothing_and_names_the_server_and_line(
    body: str, kind: dict[str, str], words: str
) -> None:
    with Client([A], transport=handler_of(body, kind), buffer=False) as client:
        stream = client.stream("wiji", 5)
        with pytest.raises(NoReplicaAvailableError) as caught:
            next(stream)  # not one line of it is handed out
    assert A in str(caught.value) and words in caught.value.reasons[A], caught.value.reasons
    with Client([A], transport=handler_of(body, kind)) as client, pytest.raises(NoReplicaAvailableError, match=A):
        client.new_id("wiji")  # refills go through the stream route


@pytest.mark.parametrize(("body", "kind", "words"), BAD_STREAMS)
def test_a_malformed_stream_is_failed_over_like_a_dead_server(body: str, kind: dict[str, str], words: str) -> None:
    with Client([A, B], transport=handler_of(body, kind)) as client:
        got = list(client.stream("wiji", 5))
        assert got == [fake_id("b", i) for i in range(5)]
        assert client.new_id("wiji").startswith("2")  # from b


@pytest.mark.parametrize(("answer", "words"), BAD_BATCHES)
def test_a_malformed_batch_is_an_error_naming_the_server_and_the_first_bad_id(answer: object, words: str) -> None:
    with Client([A], transport=handler_of("", TEXT, answer)) as client:
        with pytest.raises(NoReplicaAvailableError) as caught:
            client.ids("wiji", 2)
        assert words in caught.value.reasons[A], caught.value.reasons
    with Client([A, B], transport=handler_of("", TEXT, answer), buffer=False) as client:
        assert client.ids("wiji", 2) == [fake_id("b", 0), fake_id("b", 1)]
        assert client.new_id("wiji").startswith("2")


@pytest.mark.parametrize(("body", "kind", "words"), BAD_STREAMS[2:4])
async def test_the_async_client_checks_as_well(body: str, kind: dict[str, str], words: str) -> None:
    sync = handler_of(body, kind)

    async def handler(request: httpx.Request) -> httpx.Response:
        return sync.handle_request(request)

    async with AsyncClient([A], transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(NoReplicaAvailableError) as caught:
            await client.new_id("wiji")
        assert words in caught.value.reasons[A]
        with pytest.raises(NoReplicaAvailableError, match=A):
            await client.ids("wiji", 2, format="hex")


# -- a server that drips its answer ----------------------------------------------------------------------------


class DripServer:
    """A TCP server on loopback that answers /v1/schemes at once and every other request a byte every
    ``interval`` seconds (in its headers, or after them in its body), for as long as the client listens."""

    def __init__(self, interval: float, in_headers: bool) -> None:
        self.interval = interval
        self.in_headers = in_headers
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stopping = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        import json

        with conn:
            try:
                while True:
                    request = b""
                    while b"\r\n\r\n" not in request:
                        data = conn.recv(65536)
                        if not data:
                            return
                        request += data
                    if request.startswith(b"GET /v1/fleet"):  # a server without fleets, at once
                        conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                        continue
                    if request.startswith(b"GET /v1/schemes"):
                        body = json.dumps(catalogue()).encode()
                        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
                        conn.sendall(b"content-length: %d\r\n\r\n%s" % (len(body), body))
                        continue
                    # 100 bytes: within what 5 IDs can need (a longer answer is refused unread, not waited for)
                    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\n"
                    if not self.in_headers:
                        conn.sendall(head)
                    for byte in (head if self.in_headers else b"") + b"0" * 100:
                        if self.stopping.wait(self.interval):
                            return
                        conn.sendall(bytes([byte]))
            except OSError:
                return

    def close(self) -> None:
        self.stopping.set()
        self.listener.close()


@pytest.fixture(params=[True, False], ids=["headers", "body"])
def drip(request: pytest.FixtureRequest) -> Iterator[DripServer]:
    server = DripServer(0.2, in_headers=request.param)
    try:
        yield server
    finally:
        server.close()


def test_a_call_timeout_is_a_deadline_for_the_whole_call(drip: DripServer) -> None:
    # A byte every 0.2 s never trips a 1 s read timeout; the whole answer would take 20 s.
    with Client(drip.url, timeout=1.0) as client:
        client.schemes()
        for call in (
            lambda: client.new_id("wiji"),
            lambda: client.ids("wiji", 5),
            lambda: list(client.stream("wiji", 5)),
        ):
            started = time.monotonic()
            with pytest.raises(NoReplicaAvailableError, match="Timeout|timeout"):
                call()
            assert time.monotonic() - started < 30  # far below the drip's 20 s: the deadline ended it


async def test_an_async_call_timeout_is_a_deadline_too(drip: DripServer) -> None:
    async with AsyncClient(drip.url, timeout=1.0) as client:
        await client.schemes()
        started = time.monotonic()
        with pytest.raises(NoReplicaAvailableError, match="Timeout|timeout"):
            await client.new_id("wiji")
        assert time.monotonic() - started < 30


# -- answers that would hand out an ID twice -------------------------------------------------------


def repeating(mode: str) -> httpx.MockTransport:
    """Replica a answers with an ID twice (``within``), replays its first answer to every later request (``replay``)
    or puts the first answer's middle IDs between fresh first and last ones (``splice``); replica b answers
    correctly, each ID once."""
    replayed: dict[str, httpx.Response] = {}
    kept: dict[str, list[str]] = {}
    counters = {"a.invalid": 0, "b.invalid": 0}

    def fresh(host: str, count: int) -> list[str]:
        first = counters[host]
        counters[host] += count
        return [fake_id(host, first + i) for i in range(count)]

    def handler(request: httpx.Request) -> httpx.Response:
        listed = catalogue_answer(request)
        if listed is not None:
            return listed
        count = int(request.url.params["count"])
        host = request.url.host
        stream = request.url.path.endswith("/stream")
        ids = fresh(host, count)
        if host == "a.invalid" and mode == "within" and count > 1:
            ids[-1] = ids[0]
        if host == "a.invalid" and mode == "splice":
            old = kept.setdefault(request.url.path, ids)
            ids = [ids[0], *old[1 : count - 1], ids[-1]] if old is not ids and count > 2 else ids
        if stream:
            answer = httpx.Response(200, text="".join(f"{i}\n" for i in ids), headers=TEXT)
        else:
            answer = httpx.Response(200, json=batch(request, ids))
        if host == "a.invalid" and mode == "replay":
            answer = replayed.setdefault(str(request.url), answer)
        return answer

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("mode", ["within", "replay", "splice"])
def test_an_answer_that_repeats_an_id_fails_its_server_and_nothing_is_handed_out_twice(mode: str) -> None:
    words = {"within": "twice", "replay": "received before", "splice": "not above"}[mode]
    with Client([A], transport=repeating(mode), buffer=False) as client:
        for call in (lambda: client.ids("wiji", 5), lambda: list(client.stream("wiji", 5))):
            first = call() if mode != "within" else []  # the replaying or splicing proxy's first answer is fresh
            with pytest.raises(NoReplicaAvailableError) as caught:
                call()
            assert words in caught.value.reasons[A], caught.value.reasons
            assert len(set(first)) == len(first)
    with Client([A, B], transport=repeating(mode)) as client:
        got = (
            client.ids("wiji", 5)
            + client.ids("wiji", 5)
            + list(client.stream("wiji", 5))
            + list(client.stream("wiji", 5))
        )
        got += [client.new_id("wiji") for _ in range(200)]
        assert len(set(got)) == len(got) == 220


def test_a_replayed_sequence_answer_fails_its_server() -> None:
    answers = {"next": {"name": "s", "ids": ["7", "8"]}, "range": {"name": "s", "first": "5", "last": "9", "count": 5}}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/fleet":
            return httpx.Response(404, json={"detail": "Not Found"})
        return httpx.Response(200, json=answers[request.url.path.rsplit("/", 1)[1]])

    with Client([A], transport=httpx.MockTransport(handler)) as client:
        assert client.next("s", 2) == [7, 8]
        with pytest.raises(NoReplicaAvailableError, match="received before"):
            client.next("s", 2)
        with pytest.raises(NoReplicaAvailableError, match="overlaps 7..8, received before"):
            client.range("s", 5)
    with Client([A], transport=httpx.MockTransport(handler)) as client:
        assert client.range("s", 5).as_range() == range(5, 10)
        with pytest.raises(NoReplicaAvailableError, match="overlaps 5..9"):
            client.range("s", 5)
        with pytest.raises(NoReplicaAvailableError, match="inside 5..9 received before"):
            client.next("s", 2)


def snowflake(worker: int, unit: int, sequence: int = 0) -> str:
    """A twitter-layout snowflake in hex."""
    return f"{unit << 22 | worker << 12 | sequence:016x}"


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_led_by_an_earlier_middle_id_fails_per_issuing_identity(stream: bool) -> None:
    answers = [
        [snowflake(5, 100), snowflake(5, 101), snowflake(5, 102)],
        [snowflake(5, 101), snowflake(5, 130), snowflake(5, 131)],  # [b, x, y]: rises, new ends
        [snowflake(6, 90), snowflake(5, 140)],  # another worker's IDs below: a load balancer's other replica
        [snowflake(5, 120)],  # a gap between earlier answers of worker 5: a late concurrent answer
        [snowflake(5, 50)],  # below worker 5's floor? not yet: only 3 spans are held, 50 is below all of them
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        known = catalogue_answer(request)
        if known is not None:
            return known
        ids = answers.pop(0)
        if stream:
            return httpx.Response(200, text="".join(f"{i}\n" for i in ids), headers={"content-type": "text/plain"})
        return httpx.Response(200, json={"scheme": "snowflake", "format": "hex", "ids": ids})

    with Client([A], transport=httpx.MockTransport(handler)) as client:

        def call(count: int) -> list[str]:
            if stream:
                return list(client.stream("snowflake", count, format="hex"))
            return client.ids("snowflake", count, format="hex")

        assert call(3) == [snowflake(5, 100), snowflake(5, 101), snowflake(5, 102)]
        with pytest.raises(NoReplicaAvailableError, match="not above an ID of its issuer .worker_id bits 0x5000"):
            call(3)
        assert call(2) == [snowflake(6, 90), snowflake(5, 140)]
        assert call(1) == [snowflake(5, 120)]
        assert call(1) == [snowflake(5, 50)]


def test_the_spans_past_the_bound_leave_a_floor() -> None:
    from idmint_client._repeats import SPANS_PER_IDENTITY, Repeats, Rule
    from idmint_client._shapes import IdShape

    info = next(s for s in catalogue()["schemes"] if s["name"] == "snowflake")  # type: ignore[attr-defined]
    shape = IdShape("snowflake", "hex", info["token_patterns"]["hex"], None, info["rising_per_identity"]["hex"])
    rule = shape.rule({})
    assert isinstance(rule, Rule) and rule.order is not None and not rule.rising
    repeats = Repeats()
    for unit in range(10, 10 + 2 * (SPANS_PER_IDENTITY + 1), 2):
        repeats.check("k", [snowflake(1, unit)], rising=rule)
    repeats.check("k", [snowflake(1, 13)], rising=rule)  # the gaps above the floor pass
    with pytest.raises(Exception, match="not above"):
        repeats.check(
            "k", [snowflake(1, 11)], rising=rule
        )  # at or below the floor (13's span pushed the lowest, 12, out): refused
    repeats.check("k", [snowflake(2, 11)], rising=rule)  # another identity


# -- answers longer than the question can need -----------------------------------------------------------------


class Endless(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body without end (``unit`` over and over, in 64 KiB chunks), counting what the client pulled."""

    def __init__(self, head: bytes, unit: bytes) -> None:
        self.head = head
        self.block = unit * (65536 // len(unit))
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        yield self.head
        while self.pulled < 1 << 30:  # bounded all the same: 1 GiB
            self.pulled += len(self.block)
            yield self.block

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk


def endless_replica(declared: bool) -> tuple[httpx.MockTransport, list[Endless]]:
    bodies: list[Endless] = []

    def handler(request: httpx.Request) -> httpx.Response:
        listed = catalogue_answer(request)
        if listed is not None:
            return listed
        if request.url.path.endswith("/stream"):
            body = Endless(b"", fake_id("a", 1).encode())
            headers = dict(TEXT)
        else:
            body = Endless(b'{"scheme": "wiji", "format": "base32", "ids": [', f'"{fake_id("a", 1)}",'.encode())
            headers = {"content-type": "application/json"}
        if declared:
            headers["content-length"] = str(100 * 1024 * 1024)
        bodies.append(body)
        return httpx.Response(200, headers=headers, stream=body)

    return httpx.MockTransport(handler), bodies


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "chunked"])
def test_an_answer_longer_than_the_count_can_need_is_refused_unread(declared: bool) -> None:
    transport, bodies = endless_replica(declared)
    with Client([A], transport=transport, buffer=False) as client:
        with pytest.raises(NoReplicaAvailableError, match="longer than") as caught:
            client.ids("wiji", 5)
        assert "refused unread" in caught.value.reasons[A]
        words = "longer than the 135 bytes" if declared else "longer than 26 characters"
        with pytest.raises(NoReplicaAvailableError, match=words):
            list(client.stream("wiji", 5))
    # 5 IDs need 5 * (26 + 3) + 4096 bytes: at most one chunk past that was pulled, none when it was declared
    assert all(body.pulled <= (0 if declared else 65536) for body in bodies), [b.pulled for b in bodies]


async def test_the_async_client_bounds_answers_too() -> None:
    transport, bodies = endless_replica(False)

    async def handler(request: httpx.Request) -> httpx.Response:
        return transport.handle_request(request)

    async with AsyncClient([A], transport=httpx.MockTransport(handler), buffer=False) as client:
        with pytest.raises(NoReplicaAvailableError, match="longer than"):
            await client.ids("wiji", 5)
        with pytest.raises(NoReplicaAvailableError, match="longer than 26 characters"):
            async for _ in client.stream("wiji", 5):
                pass
    assert all(body.pulled <= 65536 for body in bodies)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        ("0", 0.0),
        ("-5", 1.0),
        ("1.5", 1.0),
        ("soon", 1.0),
        ("301", 300.0),
        ("1000000000000", 300.0),
        ("9" * 400, 300.0),
        ("Fri, 31 Dec 9999 23:59:59 GMT", 300.0),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
    ],
)
def test_retry_after_one_rule(value: str, seconds: float) -> None:
    response = httpx.Response(503, headers={"retry-after": value})
    assert retry_after_s(response) == seconds
