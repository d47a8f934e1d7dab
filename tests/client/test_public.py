"""Public IDs from the client: ``format="public"`` passed through on issuing (batch, buffered, stream) and on a
sequence's ``next``, answers checked for what a public ID is (its token pattern, no repeat; never rising order, nor
integers), and ``reveal`` / ``reveal_many`` reading them back, against a live ``idmint serve`` with a key file."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from idmint_client import (
    AsyncClient,
    Client,
    NoReplicaAvailableError,
    RequestRejectedError,
    Revealed,
    UnknownPublicIdError,
    UnknownSchemeError,
    Unrevealed,
    ValidationError,
)

from tests.client.fakes import catalogue
from tests.public.support import SECRET_1, key_file
from tests.support.server import Server

pytestmark = pytest.mark.anyio

PUBLIC_SCHEMES = ["snowflake", "eight-byte", "uuidv7", "ulid", "typeid"]
A = "http://a.invalid"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One ready ``idmint serve`` with a public-ID key file (key 1)."""
    workdir = tmp_path_factory.mktemp("keyed")
    keys = key_file(workdir / "keys.toml", (1, SECRET_1))
    replica = Server(workdir, {"IDMINT_PUBLIC_ID_KEYS_FILE": str(keys)})
    try:
        replica.wait("/readyz")
        yield replica
    finally:
        replica.stop()


def patterns(server: Server) -> dict[str, re.Pattern[str]]:
    entries = httpx.get(f"{server.url}/v1/schemes", timeout=10).json()["schemes"]
    return {s["name"]: re.compile(s["token_patterns"]["public"]) for s in entries if "public" in s["token_patterns"]}


def test_issue_public_ids_every_way_and_reveal_them(keyed: Server) -> None:
    shapes = patterns(keyed)
    assert sorted(shapes) == sorted(PUBLIC_SCHEMES)
    with Client(keyed.url) as client:
        for scheme in PUBLIC_SCHEMES:
            options = {"type": "order"} if scheme == "typeid" else {}
            batch = client.ids(scheme, 1000, format="public", **options)  # public IDs do not rise: no order check
            streamed = list(client.stream(scheme, 300, format="public", **options))
            buffered = [client.new_id(scheme, format="public", **options) for _ in range(5)]
            texts = batch + streamed + buffered
            assert len(set(texts)) == len(texts) and all(shapes[scheme].fullmatch(t) for t in texts)
            assert batch != sorted(batch)
            revealed = client.reveal_many(texts)
            assert all(isinstance(r, Revealed) for r in revealed)
            opened = [r for r in revealed if isinstance(r, Revealed)]
            assert [r.text for r in opened] == texts
            assert {(r.scheme, r.key_id) for r in opened} == {(scheme, 1)}
            assert all(r.decoded is not None and r.decoded.id == r.id and r.decoded.timestamp for r in opened)
            if scheme in ("snowflake", "uuidv7", "ulid"):  # the internal IDs of one answer rise in issue order
                assert [r.id for r in opened[:1000]] == sorted(r.id for r in opened[:1000])
            one = client.reveal(texts[0])
            assert one == opened[0] and one.decoded is not None and one.decoded.scheme == scheme
            if scheme == "typeid":
                assert one.id.startswith("order_") and texts[0].startswith("order_")


def test_a_text_no_key_opens(keyed: Server) -> None:
    with Client(keyed.url) as client:
        text = client.new_id("snowflake", format="public")
        plain = client.new_id("uuidv7")
        for unopened in ("0" * 18, plain, "not-a-public-id"):
            with pytest.raises(UnknownPublicIdError, match="no key in force opens") as caught:
                client.reveal(unopened)
            assert caught.value.status == 404 and isinstance(caught.value, LookupError | RequestRejectedError)
            assert not isinstance(caught.value, UnknownSchemeError)
        items = client.reveal_many(["0" * 18, text, plain])
        assert isinstance(items[0], Unrevealed) and "no key in force" in items[0].error
        assert isinstance(items[1], Revealed) and items[1].scheme == "snowflake"
        assert isinstance(items[2], Unrevealed) and items[2].text == plain
        assert client.reveal_many([]) == []
        with pytest.raises(TypeError, match="reveal_many takes a sequence"):
            client.reveal_many(text)


def test_a_sequence_next_in_public_form(keyed: Server) -> None:
    r = httpx.post(f"{keyed.url}/v1/sequences", json={"name": "pub-orders", "start": 1, "cache": 100}, timeout=10)
    assert r.status_code == 201, r.text
    with Client(keyed.url) as client:
        texts = client.next("pub-orders", 50, format="public")
        assert len(texts) == 50 and all(re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{17}[1-9A-F]", t) for t in texts)
        revealed = client.reveal_many(texts)
        values = [int(r.id) for r in revealed if isinstance(r, Revealed) and r.scheme == "sequence"]
        assert values == list(range(1, 51))  # the texts keep no order; the integers behind them do
        assert all(isinstance(r, Revealed) and r.decoded is None and r.key_id == 1 for r in revealed)
        assert client.next("pub-orders", 2) == [51, 52]  # the integers go on
        with pytest.raises(ValueError, match="format must be 'public'"):
            client.next("pub-orders", 2, format="string")  # type: ignore[call-overload]


def test_without_a_key_file_public_is_a_bad_request_naming_the_setting(server: Server) -> None:
    with Client(server.url) as client:
        with pytest.raises(ValidationError, match="IDMINT_PUBLIC_ID_KEYS_FILE"):
            client.ids("snowflake", 3, format="public")
        with pytest.raises(ValidationError, match="IDMINT_PUBLIC_ID_KEYS_FILE"):
            client.reveal("0" * 18)
        with pytest.raises(ValidationError, match="IDMINT_PUBLIC_ID_KEYS_FILE"):
            client.reveal_many(["0" * 18])
        with pytest.raises(ValidationError, match="format=public is not available for ksuid"):
            client.ids("ksuid", 3, format="public")


@pytest.fixture
def async_sequence(keyed: Server) -> str:
    r = httpx.post(f"{keyed.url}/v1/sequences", json={"name": "pub-async", "start": 7}, timeout=10)
    assert r.status_code == 201, r.text
    return "pub-async"


async def test_the_async_client_the_same(keyed: Server, async_sequence: str) -> None:
    async with AsyncClient(keyed.url) as client:
        texts = await client.ids("eight-byte", 500, format="public")
        texts += [await client.new_id("ulid", format="public") for _ in range(3)]
        texts += [t async for t in client.stream("uuidv7", 200, format="public")]
        texts += await client.next(async_sequence, 3, format="public")
        revealed = await client.reveal_many(texts)
        assert [r.scheme for r in revealed if isinstance(r, Revealed)] == (
            ["eight-byte"] * 500 + ["ulid"] * 3 + ["uuidv7"] * 200 + ["sequence"] * 3
        )
        assert sorted(int(r.id) for r in revealed[-3:] if isinstance(r, Revealed)) == [7, 8, 9]
        assert (await client.reveal(texts[0])).id == revealed[0].id  # type: ignore[union-attr]
        with pytest.raises(UnknownPublicIdError):
            await client.reveal("0" * 18)
        assert isinstance((await client.reveal_many(["0" * 18]))[0], Unrevealed)


# -- answers checked as public IDs -----------------------------------------------------------------------------


def public_catalogue(claims_order: bool) -> dict[str, object]:
    """The real catalogue; ``claims_order``: one that (wrongly) lists the public form as rising, per answer and per
    identity (the client never checks public IDs for order, whatever a catalogue says)."""
    data = catalogue()
    if claims_order:
        for entry in data["schemes"]:  # type: ignore[attr-defined]
            if "public" in entry["token_patterns"]:
                entry["rising"]["public"] = {}
                entry["rising_per_identity"]["public"] = {
                    "needs": {},
                    "digits": "0123456789ABCDEFGHJKMNPQRSTVWXYZ",
                    "strip": "",
                    "identity": [{"field": "worker", "shift": 0, "bits": 4}],
                }
    return data


def fake_public(served: list[list[str]], claims_order: bool = False) -> httpx.MockTransport:
    """A server answering each batch with the next list of ``served`` (public snowflake texts) and each sequence
    ``next`` with the next one too."""
    answers = iter(served)

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/schemes":
            return httpx.Response(200, json=public_catalogue(claims_order))
        if path == "/v1/fleet":
            return httpx.Response(404, json={"detail": "Not Found"})
        if path.startswith("/v1/sequences/"):
            return httpx.Response(200, json={"name": path.split("/")[3], "ids": next(answers)})
        return httpx.Response(200, json={"scheme": "snowflake", "format": "public", "ids": next(answers)})

    return httpx.MockTransport(handler)


FALLING = ["ZZZZZZZZZZZZZZZZZ1", "YYYYYYYYYYYYYYYYY1", "000000000000000001"]


def test_public_answers_are_never_checked_for_order() -> None:
    with Client([A], transport=fake_public([FALLING, ["111111111111111111"]], claims_order=True)) as client:
        assert client.ids("snowflake", 3, format="public") == FALLING
        assert client.ids("snowflake", 1, format="public") == ["111111111111111111"]


def test_a_public_text_twice_fails_its_server() -> None:
    repeated = [FALLING[0], FALLING[1], FALLING[0]]
    with Client([A], transport=fake_public([repeated])) as client:
        with pytest.raises(NoReplicaAvailableError, match="twice"):
            client.ids("snowflake", 3, format="public")
    with Client([A], transport=fake_public([FALLING, [FALLING[2]]])) as client:
        client.ids("snowflake", 3, format="public")
        with pytest.raises(NoReplicaAvailableError, match="received before"):
            client.ids("snowflake", 1, format="public")
    with Client([A], transport=fake_public([["not a public text"]])) as client:
        with pytest.raises(NoReplicaAvailableError, match="not a snowflake ID"):
            client.ids("snowflake", 1, format="public")


def test_a_sequence_public_text_twice_or_misshapen_fails_its_server() -> None:
    with Client([A], transport=fake_public([FALLING, [FALLING[1]]])) as client:
        assert client.next("s", 3, format="public") == FALLING
        with pytest.raises(NoReplicaAvailableError, match="received before"):
            client.next("s", 1, format="public")
    with Client([A], transport=fake_public([["12"]])) as client:
        with pytest.raises(NoReplicaAvailableError, match="not a sequence integer's public text"):
            client.next("s", 1, format="public")
    with Client([A], transport=fake_public([[FALLING[0], FALLING[0]]])) as client:
        with pytest.raises(NoReplicaAvailableError, match="twice"):
            client.next("s", 2, format="public")


def test_a_reveal_answer_that_is_not_one_fails_its_server() -> None:
    bodies = iter(
        [
            {"items": [{"id": "1", "scheme": "sequence", "key_id": 1, "decoded": None}]},  # one item for two texts
            {"items": [{"id": "1", "scheme": "sequence", "key_id": 0}, {"error": "no key"}]},  # key_id 0
            {"items": [{"id": "1", "scheme": "sequence", "key_id": 1}, {"error": "no key"}]},
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/fleet":
            return httpx.Response(404, json={"detail": "Not Found"})
        return httpx.Response(200, json=next(bodies))

    with Client([A], transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(NoReplicaAvailableError, match="1 items for 2 texts"):
            client.reveal_many(["a", "b"])
        with pytest.raises(NoReplicaAvailableError, match="key_id 0"):
            client.reveal_many(["a", "b"])
        got = client.reveal_many(["a", "b"])
        assert got == [Revealed("a", "1", "sequence", 1, None), Unrevealed("b", "no key")]


def test_reveal_many_splits_above_10000_texts(keyed: Server) -> None:
    with Client(keyed.url) as client:
        texts = client.ids("snowflake", 1000, format="public") * 11  # 11,000 texts, in two requests
        revealed = client.reveal_many(texts)
        assert len(revealed) == 11_000 and revealed[10_500] == revealed[500]
