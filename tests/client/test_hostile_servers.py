"""The client against servers (or proxies) that break their promises: 200 answers that are not IDs, and answers
dripped a byte at a time. Malformed answers are an error naming the server and the first bad line, nothing of
them is handed out, and the server is failed over like a dead one; a call's timeout is a deadline for the call."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from idmint_client import AsyncClient, Client, NoReplicaAvailable

from tests.client.fakes import catalogue, catalogue_answer, fake_id

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
BAD_BATCHES = [
    ({"ids": ["", ""]}, "ID 1 is not a wiji ID (base32): ''"),
    ({"ids": [None, None]}, "ID 1 is not a wiji ID (base32): 'None'"),
    ({"ids": [1, 2]}, "ID 1 is not a wiji ID (base32): '1'"),
    ({"ids": [fake_id("a", 1), "<html>"]}, "ID 2 is not a wiji ID (base32): '<html>'"),
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
        return httpx.Response(200, json={"ids": fresh(count)})

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(("body", "kind", "words"), BAD_STREAMS)
def test_a_malformed_stream_yields_nothing_and_names_the_server_and_line(
    body: str, kind: dict[str, str], words: str
) -> None:
    with Client([A], transport=handler_of(body, kind), buffer=False) as client:
        stream = client.stream("wiji", 5)
        with pytest.raises(NoReplicaAvailable) as caught:
            next(stream)  # not one line of it is handed out
    assert A in str(caught.value) and words in caught.value.reasons[A], caught.value.reasons
    with Client([A], transport=handler_of(body, kind)) as client, pytest.raises(NoReplicaAvailable, match=A):
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
        with pytest.raises(NoReplicaAvailable) as caught:
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
        with pytest.raises(NoReplicaAvailable) as caught:
            await client.new_id("wiji")
        assert words in caught.value.reasons[A]
        with pytest.raises(NoReplicaAvailable, match=A):
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
                    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100000\r\n\r\n"
                    if not self.in_headers:
                        conn.sendall(head)
                    for byte in (head if self.in_headers else b"") + b"0" * 100000:
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
    # A byte every 0.2 s never trips a 1 s read timeout; the whole answer would take 20,000 s.
    with Client(drip.url, timeout=1.0) as client:
        client.schemes()
        for call in (
            lambda: client.new_id("wiji"),
            lambda: client.ids("wiji", 5),
            lambda: list(client.stream("wiji", 5)),
        ):
            started = time.monotonic()
            with pytest.raises(NoReplicaAvailable, match="Timeout|timeout"):
                call()
            assert time.monotonic() - started < 30  # far below the drip's 20,000 s: the deadline ended it


async def test_an_async_call_timeout_is_a_deadline_too(drip: DripServer) -> None:
    async with AsyncClient(drip.url, timeout=1.0) as client:
        await client.schemes()
        started = time.monotonic()
        with pytest.raises(NoReplicaAvailable, match="Timeout|timeout"):
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
            answer = httpx.Response(200, json={"ids": ids})
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
            with pytest.raises(NoReplicaAvailable) as caught:
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
        with pytest.raises(NoReplicaAvailable, match="received before"):
            client.next("s", 2)
        with pytest.raises(NoReplicaAvailable, match="holds 7, received before"):
            client.range("s", 5)
    with Client([A], transport=httpx.MockTransport(handler)) as client:
        assert client.range("s", 5).as_range() == range(5, 10)
        with pytest.raises(NoReplicaAvailable, match="overlaps 5..9"):
            client.range("s", 5)
        with pytest.raises(NoReplicaAvailable, match="inside the range 5..9"):
            client.next("s", 2)
