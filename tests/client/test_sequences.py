"""Sequences from the client: ``next`` and ``range`` against live ``idmint serve`` processes, Python ints
exact above 2**53 (asked as strings), failover across servers of one fleet with no integer twice, servers of two
fleets refused, and answers that are not sequence integers failing their server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from idmint_client import (
    AsyncClient,
    Client,
    NoReplicaAvailableError,
    ParsedNumber,
    RequestRejectedError,
    Reservation,
    SequenceNumbers,
    SequenceRange,
    SequenceStoresDifferError,
    Settled,
    UnknownSchemeError,
    UnknownSequenceError,
    ValidationError,
)

from tests.support.server import Server, free_port

pytestmark = pytest.mark.anyio

MAX_VALUE = 2**63 - 1
FLEET_ID = "00000000-0000-4000-8000-000000000001"


def create(url: str, name: str, start: int = 1, cache: int = 100, **settings: object) -> None:
    body = {"name": name, "start": start, "cache": cache, **settings}
    r = httpx.post(f"{url}/v1/sequences", json=body, timeout=10)
    assert r.status_code in (200, 201), r.text


def test_next_and_range_give_exact_python_ints(server: Server) -> None:
    start = MAX_VALUE - 10**7  # far above 2**53: a JSON number would be rounded by many readers
    create(server.url, "client-big", start=start)
    with Client(server.url) as client:
        assert client.next("client-big") == [start]
        got = client.next("client-big", 5)
        assert got == list(range(start + 1, start + 6)) and all(type(i) is int for i in got)
        block = client.range("client-big", 2**40 // 2**20)
        assert isinstance(block, SequenceRange) and block.name == "client-big"
        assert block.count == 2**20 and block.last - block.first + 1 == 2**20 and block.first > start + 5
        assert block.as_range() == range(block.first, block.last + 1)
        assert client.next("client-big")[0] not in block.as_range()
        with pytest.raises(UnknownSequenceError, match="no sequence named 'nope'") as caught:
            client.next("nope")
        assert not isinstance(caught.value, UnknownSchemeError) and isinstance(caught.value, LookupError)
        with pytest.raises(UnknownSequenceError):
            client.range("nope", 3)
        with pytest.raises(ValidationError, match="count must be in 1..100000"):
            client.next("client-big", 0)
        with pytest.raises(ValidationError, match="count must be in 1..100000"):
            client.next("client-big", 100_001)
        with pytest.raises(ValidationError, match="must match"):
            client.next("Client Big")  # quoted into the path: the server names the rule
        for name in ("client-big/next", "../../ids/wiji", "client-big/range"):
            with pytest.raises(UnknownSequenceError):  # a slash (even quoted) reaches no other route
                client.next(name)
        with pytest.raises(ValidationError, match=r"2\*\*63-1"):
            client.range("client-big", 2**40)  # fewer remain before the maximum


async def test_async_client_next_and_range(server: Server) -> None:
    create(server.url, "client-async")
    async with AsyncClient(server.url) as client:
        got = await asyncio.gather(*(client.next("client-async", 3) for _ in range(50)))
        flat = [i for part in got for i in part]
        assert len(set(flat)) == 150 and all(part == sorted(part) for part in got)
        block = await client.range("client-async", 1000)
        assert block.count == 1000 and not set(flat) & set(block.as_range())
        with pytest.raises(UnknownSequenceError):
            await client.range("nope", 1)


def test_two_servers_of_one_fleet_share_the_sequence_and_fail_over(tmp_path: Path) -> None:
    env = {"IDMINT_STATE_DIR": str(tmp_path / "shared")}  # one state directory: one fleet, one store
    a, b = Server(tmp_path, env), Server(tmp_path, env)
    dead = f"http://127.0.0.1:{free_port()}"
    try:
        a.wait("/readyz")
        b.wait("/readyz")
        create(a.url, "shared", cache=10)
        with Client([a.url, dead, b.url], timeout=3) as client:
            got = [i for _ in range(60) for i in client.next("shared", 7)]
            got += list(client.range("shared", 500).as_range())
            assert len(set(got)) == len(got)
            b.stop()
            got += [i for _ in range(10) for i in client.next("shared", 3)]  # only a is left
            assert len(set(got)) == len(got)
    finally:
        a.stop()
        b.stop()


def test_servers_of_two_fleets_are_refused_for_sequences(tmp_path: Path) -> None:
    env = {"IDMINT_REGIONS": "2", "IDMINT_EIGHT_BYTE_GENERATORS": "4", "IDMINT_SNOWFLAKE_WORKERS": "4"}
    nodes = [Server(tmp_path, {**env, "IDMINT_REGION": str(i)}) for i in range(2)]  # own state dirs: two fleets
    try:
        for node in nodes:
            node.wait("/readyz")
            create(node.url, "orders")
        with Client([n.url for n in nodes]) as client:
            assert len(client.ids("wiji", 4)) == 4  # schemes: two regions are fine
            assert len(client.ids("wiji", 4)) == 4  # (both servers read)
            with pytest.raises(SequenceStoresDifferError, match="keep separate sequences"):
                client.next("orders")
            with pytest.raises(SequenceStoresDifferError):
                client.range("orders", 5)
        with Client(nodes[0].url) as client:
            assert client.next("orders") == [1]  # one server: its fleet's sequences
    finally:
        for node in nodes:
            node.stop()


def fleet(handler: Callable[[httpx.Request], httpx.Response], fleet_status: int = 200) -> httpx.MockTransport:
    def route(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/fleet":
            if fleet_status == 404:
                return httpx.Response(404, json={"detail": "Not Found"})
            return httpx.Response(200, json={"fleet_id": FLEET_ID, "region": 0, "regions": 1, "schemes": {}})
        return handler(request)

    return httpx.MockTransport(route)


@pytest.mark.parametrize(
    "answer",
    [
        {"name": "s", "ids": [1, 2]},  # numbers, not the strings asked for
        {"name": "s", "ids": ["1", "1"]},  # not rising
        {"name": "s", "ids": ["2", "1"]},
        {"name": "s", "ids": ["1"]},  # too few
        {"name": "s", "ids": ["01", "2"]},  # not canonical decimal
        {"name": "s", "ids": ["1", "٣"]},  # another script's digit
        {"name": "s", "ids": ["1", str(MAX_VALUE + 1)]},  # past 2**63-1
        {"name": "s", "ids": ["-1", "2"]},
        {"name": "t", "ids": ["1", "2"]},  # another sequence
        {"ids": ["1", "2"]},
        ["1", "2"],
    ],
)
def test_an_answer_that_is_not_sequence_integers_fails_its_server(answer: object) -> None:
    asked: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url)
        if request.url.host == "good":
            first = 7 + 2 * sum(u.host == "good" for u in asked[:-1])  # fresh integers on every call
            return httpx.Response(200, json={"name": "s", "ids": [str(first), str(first + 1)]})
        return httpx.Response(200, json=answer)

    with Client(["http://bad", "http://good"], transport=fleet(handler)) as client:
        assert client.next("s", 2) == [7, 8]
        assert client.next("s", 2) == [9, 10]  # the bad server is kept out (or tried and failed again)
    assert asked[0].params["format"] == "string" and asked[0].params["count"] == "2"
    with Client(["http://bad"], transport=fleet(handler)) as client, pytest.raises(NoReplicaAvailableError):
        client.next("s", 2)


@pytest.mark.parametrize(
    "answer",
    [
        {"name": "s", "first": 1, "last": 3, "count": 3},
        {"name": "s", "first": "1", "last": "4", "count": 3},
        {"name": "s", "first": "1", "last": "3", "count": "3"},
        {"name": "s", "first": "1", "last": "3"},
        {"name": "s", "first": str(MAX_VALUE), "last": str(MAX_VALUE + 2), "count": 3},
    ],
)
def test_a_range_answer_that_is_not_the_range_asked_for_fails_its_server(answer: object) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.method == "POST" and request.url.path == "/v1/sequences/s/range"
        return httpx.Response(200, json=answer)

    with Client(["http://bad"], transport=fleet(handler)) as client, pytest.raises(NoReplicaAvailableError):
        client.range("s", 3)


def test_a_server_that_does_not_tell_its_fleet_is_refused_beside_others() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"name": "s", "ids": ["1"]})

    with Client(["http://a", "http://b"], transport=fleet(handler, fleet_status=404)) as client:
        with pytest.raises(SequenceStoresDifferError, match="does not tell its fleet"):
            client.next("s")
    with Client("http://a", transport=fleet(handler, fleet_status=404)) as client:
        assert client.next("s") == [1]  # alone, it is the only store there is


def test_numbers_parse_and_gapless_reservations(server: Server) -> None:
    r = httpx.post(
        f"{server.url}/v1/sequences",
        json={"name": "client-inv", "reset": "yearly", "template": "INV-{yyyy}-{seq:05}{check}", "check_digit": "damm"},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    httpx.post(f"{server.url}/v1/sequences", json={"name": "client-gap", "mode": "gapless"}, timeout=10)
    with Client(server.url) as client:
        numbers = client.numbers("client-inv", 2)
        assert isinstance(numbers, SequenceNumbers) and numbers.ids == [1, 2] and len(numbers.texts) == 2
        year = numbers.period
        assert year is not None and year.endswith("-01-01") and numbers.texts[0].startswith(f"INV-{year[:4]}-00001")
        parsed = client.parse("client-inv", numbers.texts[1])
        assert isinstance(parsed, ParsedNumber)
        assert (parsed.value, parsed.period, parsed.check_digit, parsed.state) == (2, year, "damm", "reserved")
        with pytest.raises(ValidationError, match="damm check digit"):
            wrong = numbers.texts[1][:-1] + str((int(numbers.texts[1][-1]) + 1) % 10)
            client.parse("client-inv", wrong)
        create(server.url, "client-plain")
        assert client.numbers("client-plain").texts == []  # a plain sequence: no texts, no period
        held = client.reserve("client-gap", ttl_s=30)
        assert isinstance(held, Reservation) and held.value == 1 and held.text is None and held.period is None
        done = client.commit("client-gap", held.reservation)
        assert isinstance(done, Settled) and (done.value, done.state) == (1, "committed")
        assert client.commit("client-gap", held.reservation).state == "committed"  # a retry answers the same
        second = client.reserve("client-gap")
        assert client.void("client-gap", second.reservation, "printer jam").state == "voided"
        with pytest.raises(RequestRejectedError, match="it was voided") as refused:
            client.commit("client-gap", second.reservation)
        assert refused.value.status == 409
        assert client.reserve("client-gap").value == 2  # the voided integer is the next one reserved
        with pytest.raises(RequestRejectedError, match="is gapless: reserve its integers"):
            client.next("client-gap")


async def test_the_async_client_reserves_and_commits(server: Server) -> None:
    create(server.url, "client-agap", mode="gapless")
    async with AsyncClient(server.url) as client:
        held = await client.reserve("client-agap")
        assert (await client.commit("client-agap", held.reservation)).state == "committed"
        held = await client.reserve("client-agap")
        assert (await client.void("client-agap", held.reservation)).state == "voided"
        create(server.url, "client-aplain")
        numbers = await client.numbers("client-aplain", 3)
        assert numbers.texts == [] and numbers.period is None and len(numbers.ids) == 3
