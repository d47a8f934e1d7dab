"""Peer interop for the standard schemes through the HTTP API, on the real ASGI app.

IDs made by the peer libraries (uuid-utils and uuid6, python-ulid, typeid-python, svix-ksuid, snowflake-id,
sonyflake) decode to their fields through ``GET /v1/decode/...`` in every accepted spelling; IDs issued by idmint
over HTTP are accepted by those libraries with the same timestamp; bad input is a 422 naming the rule.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import typeid as typeid_python
import ulid as python_ulid
import uuid6
import uuid_utils
from fastapi.testclient import TestClient
from ksuid import Ksuid  # svix-ksuid
from snowflake import Snowflake as PeerSnowflake  # snowflake-id
from snowflake import SnowflakeGenerator as PeerSnowflakeGenerator
from sonyflake import Sonyflake

from tests.helpers import running_app

TWITTER_EPOCH_MS = 1288834974657
DISCORD_EPOCH_MS = 1420070400000
SONYFLAKE_START = datetime.datetime(2014, 9, 1, tzinfo=datetime.UTC)
SONYFLAKE_EPOCH_MS = 1409529600000


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("state")) as c:
        yield c


def decoded(client: TestClient, scheme: str, text: str, **params: str) -> dict:
    r = client.get(f"/v1/decode/{scheme}/{text}", params=params)
    assert r.status_code == 200, (scheme, text, r.text)
    return r.json()


def spellings_of_uuid(u: uuid.UUID) -> list[str]:
    text = str(u)
    return [text, text.upper(), "{" + text + "}", "urn:uuid:" + text, u.hex, u.hex.upper()]


# --- peer IDs decode here -------------------------------------------------------------------------------------------


def test_uuidv7_from_uuid_utils_and_uuid6_decode_in_every_spelling(client: TestClient) -> None:
    for _ in range(10):
        for value in (uuid_utils.uuid7(), uuid6.uuid7()):
            u = uuid.UUID(str(value))
            expected_ms = u.int >> 80
            for text in spellings_of_uuid(u):
                d = decoded(client, "uuidv7", text)
                assert d["id"] == str(u) and d["hex"] == u.hex
                assert d["fields"]["timestamp_ms"] == expected_ms
                assert d["fields"]["rand_a"] == (u.int >> 64) & 0xFFF
                assert d["fields"]["rand_b"] == f"{u.int & ((1 << 62) - 1):016x}"


def test_ulid_from_python_ulid_decodes_in_every_spelling(client: TestClient) -> None:
    for _ in range(10):
        theirs = python_ulid.ULID()
        for text in (str(theirs), str(theirs).lower(), str(theirs.to_uuid()), theirs.hex, theirs.hex.upper()):
            d = decoded(client, "ulid", text)
            assert d["id"] == str(theirs)
            assert d["fields"] == {"timestamp_ms": theirs.milliseconds, "random": theirs.hex[12:]}


def test_typeid_from_typeid_python_decodes(client: TestClient) -> None:
    for prefix in ("", "user", "my_type"):
        for _ in range(5):
            theirs = typeid_python.TypeID(prefix=prefix or None)
            their_uuid = uuid.UUID(str(theirs.uuid))
            d = decoded(client, "typeid", str(theirs))
            assert d["id"] == str(theirs)
            assert d["fields"] == {
                "prefix": prefix,
                "uuid": str(their_uuid),
                "version": 7,
                "timestamp_ms": their_uuid.int >> 80,
            }
            # Its UUID, in every UUID spelling, is the same UUIDv7.
            for text in spellings_of_uuid(their_uuid):
                assert decoded(client, "uuidv7", text)["fields"]["timestamp_ms"] == their_uuid.int >> 80


def test_ksuid_from_svix_ksuid_decodes_in_every_spelling(client: TestClient) -> None:
    for _ in range(10):
        peer = Ksuid()
        for text in (str(peer), bytes(peer).hex(), bytes(peer).hex().upper()):
            d = decoded(client, "ksuid", text)
            assert d["id"] == str(peer)
            assert d["fields"] == {"timestamp_s": int(peer.timestamp), "payload": peer.payload.hex()}


@pytest.mark.parametrize(("layout", "epoch_ms"), [("twitter", TWITTER_EPOCH_MS), ("discord", DISCORD_EPOCH_MS)])
def test_snowflake_from_snowflake_id_decodes_in_every_spelling(client: TestClient, layout: str, epoch_ms: int) -> None:
    peer = PeerSnowflakeGenerator(421, epoch=epoch_ms)
    for _ in range(10):
        value = next(peer)
        parsed = PeerSnowflake.parse(value, epoch_ms)
        for text in (str(value), f"{value:016x}", f"{value:016X}", hex(value)):
            d = decoded(client, "snowflake", text, layout=layout)
            assert d["id"] == str(value)
            assert d["fields"] == {
                "layout": layout,
                "timestamp_ms": parsed.milliseconds,
                "worker_id": 421,
                "sequence": parsed.seq,
            }


def test_snowflake_from_sonyflake_decodes(client: TestClient) -> None:
    peer = Sonyflake(machine_id=4242, start_time=SONYFLAKE_START)
    for _ in range(10):
        value = peer.next_id()
        time_units, sequence, machine_id = peer.decompose(value)
        for text in (str(value), f"{value:016x}"):
            d = decoded(client, "snowflake", text, layout="sonyflake")
            assert d["fields"] == {
                "layout": "sonyflake",
                "timestamp_ms": SONYFLAKE_EPOCH_MS + time_units * 10,
                "worker_id": 4242,
                "sequence": sequence,
            }


# --- IDs issued here are accepted by the peers --------------------------------------------------------------------


def issued(client: TestClient, scheme: str, count: int = 50, **params: str) -> list[str]:
    r = client.get(f"/v1/ids/{scheme}", params={"count": count, **params})
    assert r.status_code == 200, r.text
    return r.json()["ids"]


def test_issued_uuidv7_accepted_by_uuid_utils_and_uuid6(client: TestClient) -> None:
    for text in issued(client, "uuidv7"):
        ms = decoded(client, "uuidv7", text)["fields"]["timestamp_ms"]
        theirs = uuid_utils.UUID(text)
        assert theirs.version == 7 and theirs.variant == uuid.RFC_4122 and theirs.timestamp == ms
        assert uuid6.UUID(text).time == ms


def test_issued_ulid_accepted_by_python_ulid(client: TestClient) -> None:
    for text in issued(client, "ulid"):
        ms = decoded(client, "ulid", text)["fields"]["timestamp_ms"]
        theirs = python_ulid.ULID.from_str(text)
        assert str(theirs) == text and theirs.milliseconds == ms
    for text in issued(client, "ulid", format="uuid"):
        assert python_ulid.ULID.from_uuid(uuid.UUID(text)).to_uuid() == uuid.UUID(text)


def test_issued_typeid_accepted_by_typeid_python(client: TestClient) -> None:
    for prefix in ("", "user"):
        for text in issued(client, "typeid", type=prefix):
            fields = decoded(client, "typeid", text)["fields"]
            theirs = typeid_python.TypeID.from_string(text)
            assert (theirs.prefix or "") == prefix and str(theirs) == text
            assert uuid.UUID(str(theirs.uuid)).int >> 80 == fields["timestamp_ms"]
            assert str(uuid.UUID(str(theirs.uuid))) == fields["uuid"]


def test_issued_ksuid_accepted_by_svix_ksuid(client: TestClient) -> None:
    for text in issued(client, "ksuid"):
        fields = decoded(client, "ksuid", text)["fields"]
        peer = Ksuid.from_base62(text)
        assert str(peer) == text and peer.timestamp == fields["timestamp_s"]
        assert peer.payload.hex() == fields["payload"]


def test_issued_snowflake_accepted_by_snowflake_id(client: TestClient) -> None:
    for text in issued(client, "snowflake"):
        fields = decoded(client, "snowflake", text)["fields"]
        parsed = PeerSnowflake.parse(int(text), TWITTER_EPOCH_MS)
        assert parsed.milliseconds == fields["timestamp_ms"]
        assert parsed.instance == fields["worker_id"] and parsed.seq == fields["sequence"]


def test_issued_sonyflake_layout_accepted_by_sonyflake(tmp_path: Path) -> None:
    peer = Sonyflake(machine_id=1, start_time=SONYFLAKE_START)
    with running_app(tmp_path, snowflake_layout="sonyflake") as node:
        for text in issued(node, "snowflake"):
            fields = decoded(node, "snowflake", text)["fields"]
            time_units, sequence, machine_id = peer.decompose(int(text))
            assert fields["layout"] == "sonyflake"
            assert SONYFLAKE_EPOCH_MS + time_units * 10 == fields["timestamp_ms"]
            assert (machine_id, sequence) == (fields["worker_id"], fields["sequence"])
            assert int(peer.to_time(int(text)).timestamp() * 1000) == fields["timestamp_ms"]


# --- bad input: 422 naming the rule -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "text", "params", "fragment"),
    [
        ("uuidv7", "017f22e2-79b0-7cc3-98c4-dc0c0c07398", {}, ""),
        ("uuidv7", "017f22e2-79b0-4cc3-98c4-dc0c0c07398f", {}, "version"),
        ("uuidv7", "017f22e2-79b0-7cc3-18c4-dc0c0c07398f", {}, "variant"),
        ("ulid", "01ARZ3NDEKTSV4RRFFQ69G5FA", {}, "26"),
        ("ulid", "81ARZ3NDEKTSV4RRFFQ69G5FAV", {}, "overflow"),
        ("ulid", "01ARZ3NDEKTSV4RRFFQ69G5FAU", {}, "'U'"),
        ("typeid", "User_01h455vb4pex5vsknk084sn02q", {}, "lowercase"),
        ("typeid", "_01h455vb4pex5vsknk084sn02q", {}, "separator"),
        ("typeid", "user_81h455vb4pex5vsknk084sn02q", {}, "overflow"),
        ("typeid", "user_01H455VB4PEX5VSKNK084SN02Q", {}, ""),
        ("ksuid", "0ujtsYcgvSTl8PAuAdqWYSMnLO", {}, "27"),
        ("ksuid", "aWgEPTl1tmebfsQzFP4bxwgy80W", {}, "overflow"),
        ("ksuid", "0ujtsYcgvSTl8PAuAdqWYSMnLO-", {}, ""),
        ("snowflake", "-175928847299117063", {}, ""),
        ("snowflake", "9223372036854775808", {}, "bit 63"),
        ("snowflake", "175928847299117063", {"layout": "martian"}, "layout"),
        ("snowflake", "175928847299117063", {"colour": "red"}, "layout"),
    ],
)
def test_bad_input_is_422_naming_the_rule(
    client: TestClient, scheme: str, text: str, params: dict[str, str], fragment: str
) -> None:
    r = client.get(f"/v1/decode/{scheme}/{text}", params=params)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and detail
    assert fragment.lower() in detail.lower(), detail


def test_a_bad_typeid_prefix_on_issue_is_422_naming_the_rule(client: TestClient) -> None:
    r = client.get("/v1/ids/typeid", params={"type": "User"})
    assert r.status_code == 422 and "prefix" in r.json()["detail"].lower()
