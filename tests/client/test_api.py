"""Every public method of Client and AsyncClient against a live ``idmint serve``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from idmint_client import (
    AsyncClient,
    Candidates,
    Client,
    ClientClosedError,
    Decoded,
    ForbiddenError,
    IdmintClientError,
    NoReplicaAvailableError,
    RequestRejectedError,
    SchemeInfo,
    UnauthorizedError,
    UnknownSchemeError,
    ValidationError,
)

from tests.client.fakes import batch, catalogue_answer, fake_id
from tests.support.server import Server, free_port

pytestmark = pytest.mark.anyio


def one_fleet(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.MockTransport:
    """A fake fleet: ``handler`` answers every request but ``GET /v1/fleet``, which tells one fleet ID for every
    host (the client reads it before first using a server)."""

    def route(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/fleet":
            return httpx.Response(200, json={"fleet_id": FAKE_FLEET_ID, "region": 0, "regions": 1, "schemes": {}})
        return handler(request)

    return httpx.MockTransport(route)


FAKE_FLEET_ID = "00000000-0000-4000-8000-000000000001"


def test_new_id_every_scheme_decodes_as_that_scheme(server: Server, scheme_names: list[str]) -> None:
    with Client(server.url) as client:
        for scheme in scheme_names:
            got = [client.new_id(scheme) for _ in range(300)]
            assert len(set(got)) == 300, scheme
            decoded = client.decode(got[-1], scheme=scheme)
            assert isinstance(decoded, Decoded) and decoded.scheme == scheme and decoded.id == got[-1]
            assert decoded.timestamp is None or abs(datetime.now(UTC) - decoded.timestamp) < timedelta(seconds=60), (
                scheme,
                decoded,
            )


def test_new_id_formats_and_options_have_their_own_buffers(server: Server) -> None:
    with Client(server.url) as client:
        hex_id = client.new_id("wiji", format="hex")
        assert len(hex_id) == 32 and int(hex_id, 16) >= 0
        ts = client.new_id("eight-byte", mode="time_sequential")
        assert client.decode(ts, scheme="eight-byte").fields["mode"] == "time_sequential"
        spread = client.new_id("eight-byte")
        assert client.decode(spread, scheme="eight-byte").fields["mode"] == "spread"
        assert {(s.scheme, s.format, tuple(s.options.items())) for s in client.stats()} == {
            ("wiji", "hex", ()),
            ("eight-byte", None, (("mode", "time_sequential"),)),
            ("eight-byte", None, ()),
        }


def test_unbuffered_new_id_asks_the_server_every_time(server: Server) -> None:
    with Client(server.url, buffer=False) as client:
        got = {client.new_id("wiji") for _ in range(50)}
        assert len(got) == 50 and client.stats() == []


def test_ids_and_stream_every_scheme(server: Server, scheme_names: list[str]) -> None:
    with Client(server.url) as client:
        for scheme in scheme_names:
            batch = client.ids(scheme, 500)
            streamed = list(client.stream(scheme, 2000))
            assert len(batch) == 500 and len(streamed) == 2000
            assert len(set(batch) | set(streamed)) == 2500, scheme


@pytest.mark.integration
def test_ids_split_above_the_server_max_count_learned_from_a_422(tmp_path: Path) -> None:
    small = Server(tmp_path, {"IDMINT_MAX_COUNT": "1000"})
    try:
        small.wait("/readyz")
        with Client(small.url) as client:
            got = client.ids("hlc-ulid", 4500)
            assert len(got) == 4500 and len(set(got)) == 4500 and got == sorted(got)
            assert client._max_count == 1000
            with pytest.raises(ValidationError, match=r"count must be in 1\.\.1000, got 0"):
                client.ids("hlc-ulid", 0)
        with Client(small.url) as client:  # learned from /v1/schemes too
            assert {s.max_count for s in client.schemes()} == {1000}
            assert len(client.ids("wiji", 2001)) == 2001
            # new_id's refills respect it as well
            assert len({client.new_id("wiji") for _ in range(5000)}) == 5000
            assert all(s.refill_size <= 1000 for s in client.stats())
    finally:
        small.stop()


def test_decode_detects_the_scheme_and_returns_typed_candidates(server: Server) -> None:
    with Client(server.url) as client:
        wiji = client.new_id("wiji")
        found = client.decode(wiji)
        assert isinstance(found, Candidates) and found.input == wiji
        assert found.best.scheme == "wiji" and "wiji" in found.schemes and len(found) >= 1
        assert all(isinstance(c, Decoded) for c in found)
        assert found.best.hex == client.decode(wiji, scheme="wiji").hex
        siq = client.new_id("siq")  # did:siq:... has colons in the path segment
        assert client.decode(siq, scheme="siq").id == siq


@pytest.mark.parametrize("bad", ["not-an-id", "ZZZZZZZZZZZZZZZZZZZZZZZZZZ", "0" * 200])
def test_decode_of_a_bad_id_raises_bad_request_with_the_rule(server: Server, bad: str) -> None:
    with Client(server.url) as client, pytest.raises(ValidationError) as caught:
        client.decode(bad, scheme="hlc-ulid")
    assert caught.value.status == 422 and caught.value.detail


def test_schemes_lists_formats_and_limits(server: Server, scheme_names: list[str]) -> None:
    with Client(server.url) as client:
        infos = client.schemes()
        assert [i.name for i in infos] == scheme_names
        for info in infos:
            assert isinstance(info, SchemeInfo) and info.formats and info.canonical_format == info.formats[0]
            assert info.max_count and info.max_stream_count and info.raw["name"] == info.name


def test_bad_requests_raise_at_once_with_the_server_detail(server: Server) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with Client([server.url, dead]) as client:
        with pytest.raises(UnknownSchemeError, match="unknown scheme"):
            client.new_id("no-such-scheme")
        with pytest.raises(ValidationError, match="mode applies only to eight-byte"):
            client.ids("wiji", 3, mode="spread")
        with pytest.raises(ValidationError, match="format"):
            list(client.stream("wiji", 3, format="no-such-format"))
        with pytest.raises(ValidationError):
            client.new_id("eight-byte", mode="sideways")
        assert issubclass(ValidationError, RequestRejectedError) and issubclass(ValidationError, ValueError)


def test_no_replica_error_names_every_replica_and_its_reason(server: Server) -> None:
    dead = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    with Client(dead, timeout=2) as client:
        for call in (
            lambda: client.new_id("wiji"),
            lambda: client.ids("wiji", 5),
            lambda: client.schemes(),
            lambda: client.decode("x"),
            lambda: list(client.stream("wiji", 5)),
        ):
            with pytest.raises(NoReplicaAvailableError) as caught:
                call()
            assert set(caught.value.reasons) == set(dead)
            assert all("Connect" in r for r in caught.value.reasons.values()), caught.value.reasons
            assert all(url in str(caught.value) for url in dead)


def test_api_key_is_sent_as_a_bearer_token_and_401_is_not_retried() -> None:
    seen: list[str | None] = []

    ids = [fake_id("a.invalid", 1), fake_id("a.invalid", 2)]

    def handler(request: httpx.Request) -> httpx.Response:
        listed = catalogue_answer(request)  # /v1/schemes is open on a real server
        if listed is not None:
            return listed
        seen.append(request.headers.get("authorization"))
        if request.headers.get("authorization") != "Bearer s3cret":
            return httpx.Response(401, json={"detail": "missing or unknown API key"})
        return httpx.Response(200, json={"scheme": "wiji", "format": "base32", "ids": ids})

    with Client(["http://a.invalid", "http://b.invalid"], api_key="s3cret", transport=one_fleet(handler)) as client:
        assert client.ids("wiji", 2) == ids
    with (
        Client(["http://a.invalid", "http://b.invalid"], transport=one_fleet(handler)) as client,
        pytest.raises(UnauthorizedError, match="unknown API key"),
    ):
        client.ids("wiji", 2)
    assert seen == ["Bearer s3cret", None]  # the 401 was not retried on the other replica


def test_a_403_is_forbidden_apart_from_a_401_and_is_not_retried() -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        listed = catalogue_answer(request)
        if listed is not None:
            return listed
        asked.append(request.url.host)
        return httpx.Response(403, json={"detail": "the API key lacks scope ids"})

    with Client(["http://a.invalid", "http://b.invalid"], api_key="k", transport=one_fleet(handler)) as client:
        with pytest.raises(ForbiddenError, match="lacks scope ids") as caught:
            client.ids("wiji", 2)
    assert caught.value.status == 403 and not isinstance(caught.value, UnauthorizedError)
    assert isinstance(caught.value, RequestRejectedError) and asked == ["a.invalid"]


def test_the_earlier_error_names_still_import_with_a_deprecation_warning() -> None:
    import idmint_client

    with pytest.warns(DeprecationWarning, match="BadRequest is deprecated: use ValidationError"):
        assert idmint_client.BadRequest is ValidationError
    with pytest.warns(DeprecationWarning, match="NoReplicaAvailable is deprecated"):
        assert idmint_client.NoReplicaAvailable is NoReplicaAvailableError
    with pytest.raises(AttributeError):
        idmint_client.NoSuchName  # noqa: B018


def test_closed_client_raises() -> None:
    client = Client("http://127.0.0.1:1")
    client.close()
    client.close()
    with pytest.raises(ClientClosedError):
        client.new_id("wiji")
    assert issubclass(ClientClosedError, IdmintClientError)


@pytest.mark.parametrize("replicas", ["", " , ", "ftp://x", []])
def test_bad_settings_are_rejected_up_front(replicas: object) -> None:
    with pytest.raises(ValueError):
        Client(replicas)


async def test_async_client_every_method(server: Server, scheme_names: list[str]) -> None:
    async with AsyncClient(server.url) as client:
        for scheme in scheme_names:
            got = await asyncio.gather(*(client.new_id(scheme) for _ in range(500)))
            assert len(set(got)) == 500, scheme
            assert (await client.decode(got[0], scheme=scheme)).scheme == scheme
            batch = await client.ids(scheme, 300)
            streamed = [i async for i in client.stream(scheme, 1500)]
            assert len(set(got) | set(batch) | set(streamed)) == 2300, scheme
        found = await client.decode(await client.new_id("wiji"))
        assert found.best.scheme == "wiji"
        assert [s.name for s in await client.schemes()] == scheme_names
        with pytest.raises(UnknownSchemeError):
            await client.new_id("no-such-scheme")
        with pytest.raises(ValidationError):
            await client.ids("wiji", 2, type="user")
        assert len({await client.new_id("hlc-ulid", format="hex") for _ in range(100)}) == 100
    async with AsyncClient(server.url, buffer=False) as client:
        assert len({await client.new_id("wiji") for _ in range(20)}) == 20 and client.stats() == []


async def test_async_client_failover_and_error_naming_every_replica(server: Server) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with AsyncClient([dead, server.url], timeout=2) as client:
        assert len(await client.ids("wiji", 10)) == 10  # the dead one is skipped
        assert len([i async for i in client.stream("wiji", 10)]) == 10
    async with AsyncClient([dead], timeout=2) as client:
        with pytest.raises(NoReplicaAvailableError, match=dead):
            await client.new_id("wiji")


def test_refused_replica_is_kept_out_for_its_retry_after() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        listed = catalogue_answer(request)
        if listed is not None:
            return listed
        calls.append(request.url.host)
        if request.url.host == "a.invalid":
            return httpx.Response(503, headers={"retry-after": "30"}, json={"detail": "lease lost", "retry_after": 30})
        count = int(request.url.params["count"])
        ids = [fake_id(request.url.host, len(calls) * 1000 + i) for i in range(count)]  # fresh on every call
        return httpx.Response(200, content=json.dumps(batch(request, ids)))

    with Client(["http://a.invalid", "http://b.invalid"], transport=one_fleet(handler)) as client:
        for _ in range(6):
            client.ids("hlc-ulid", 1)
        # a refused once; every later call went straight to b; another scheme may still ask a
        assert calls.count("a.invalid") == 1 and calls.count("b.invalid") == 6
        client.ids("wiji", 1)
        assert calls.count("a.invalid") == 2


class _TruncatedBody(httpx.SyncByteStream):
    """A body that ends mid-line with a broken transfer, as when a replica dies inside a chunked stream."""

    def __iter__(self) -> Iterator[bytes]:
        yield f"{fake_id('a', 1)}\n{fake_id('a', 2)}\n".encode()
        yield f"{fake_id('a', 3)}\n{fake_id('a', 4)[:5]}".encode()
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")


def test_stream_yields_only_complete_lines_and_asks_the_next_replica_for_the_rest() -> None:
    asked: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        listed = catalogue_answer(request)
        if listed is not None:
            return listed
        count = request.url.params["count"]
        asked.append((request.url.host, count))
        text = "text/plain; charset=us-ascii"
        if request.url.host == "a.invalid":
            return httpx.Response(200, stream=_TruncatedBody(), headers={"content-type": text})
        body = "".join(f"{fake_id('b', i)}\n" for i in range(int(count)))
        return httpx.Response(200, text=body, headers={"content-type": text})

    with Client(["http://a.invalid", "http://b.invalid"], transport=one_fleet(handler)) as client:
        got = list(client.stream("wiji", 10))
    # the partial fourth line of a was discarded
    assert got == [fake_id("a", 1), fake_id("a", 2), fake_id("a", 3)] + [fake_id("b", i) for i in range(7)]
    assert asked == [("a.invalid", "10"), ("b.invalid", "7")]
