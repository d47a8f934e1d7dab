"""``POST /v1/ids/{scheme}/backfill`` through the real ASGI app on the embedded backend: IDs at past times, in the
order asked, each decoding to its time at the scheme's precision; every refusal named; the capacity limit; the
``backfill`` API-key scope; the metric."""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.schemes import get_scheme
from tests.helpers import running_app

BACKFILLED = ("snowflake", "eight-byte", "uuidv7", "ulid", "ksuid", "typeid")
TIMES = [
    "2021-03-04T05:06:07.890Z",
    "2021-03-04T05:06:07.890Z",
    "2020-01-01T00:00:00.123+02:00",
    "2015-06-01T00:00:00Z",
]


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def at_precision(text: str, unit_s: float) -> str:
    """The decode page's timestamp of an ID made at ``text``: floored to the unit, UTC, in ms."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    unit = timedelta(seconds=unit_s)
    return rfc3339(epoch + (moment - epoch) // unit * unit)


@pytest.fixture
def client(tmp_path: Path):
    with running_app(tmp_path, backfill_identities=4) as c:
        yield c


@pytest.mark.parametrize("scheme", BACKFILLED)
def test_every_id_decodes_to_its_time_in_the_order_asked(client, scheme: str) -> None:
    unit_s = 1.0 if scheme == "ksuid" else 0.001
    start = datetime(2019, 5, 1, tzinfo=UTC)
    times = [*TIMES, *(rfc3339(start + timedelta(milliseconds=random.randrange(10**10))) for _ in range(200))]
    r = client.post(f"/v1/ids/{scheme}/backfill", json={"times": times})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["scheme"] == scheme and body["format"] == get_scheme(scheme).formats[0]
    assert len(body["ids"]) == len(times) == len(set(body["ids"]))
    for text, got in zip(times, body["ids"], strict=True):
        decoded = client.get(f"/v1/decode/{scheme}/{got}").json()
        assert decoded["timestamp"] == at_precision(text, unit_s), (text, got)


@pytest.mark.parametrize(
    ("scheme", "options"),
    [
        ("eight-byte", {"mode": "time_sequential", "format": "decimal"}),
        ("typeid", {"type": "user"}),
        ("snowflake", {"format": "hex"}),
        ("ulid", {"format": "uuid"}),
        ("ksuid", {"format": "hex"}),
    ],
)
def test_format_and_scheme_options_as_the_issue_route_takes_them(client, scheme: str, options: dict) -> None:
    r = client.post(f"/v1/ids/{scheme}/backfill", json={"times": TIMES[:1], **options})
    assert r.status_code == 200, r.text
    (got,) = r.json()["ids"]
    decoded = client.get(f"/v1/decode/{scheme}/{got}").json()
    assert decoded["timestamp"] == at_precision(TIMES[0], 1.0 if scheme == "ksuid" else 0.001)
    if scheme == "typeid":
        assert got.startswith("user_")
    if scheme == "eight-byte":
        assert decoded["fields"]["mode"] == "time_sequential"
    # the query carries them as well
    query = "&".join(f"{k}={v}" for k, v in options.items())
    assert client.post(f"/v1/ids/{scheme}/backfill?{query}", json={"times": TIMES[:1]}).status_code == 200


def test_identity_schemes_take_the_backfill_reserve_never_a_live_identity(client) -> None:
    for scheme, field, top in (("snowflake", "worker_id", 1023), ("eight-byte", "generator_id", 2047)):
        live = client.get("/v1/schemes").json()
        got = client.post(f"/v1/ids/{scheme}/backfill", json={"times": TIMES * 50}).json()["ids"]
        identities = {client.get(f"/v1/decode/{scheme}/{text}").json()["fields"][field] for text in got}
        assert identities <= set(range(top - 3, top + 1)), identities
        node = next(s for s in live["schemes"] if s["name"] == scheme)["node"]
        assert not set(node["identities"]) & identities


def test_two_requests_into_one_millisecond_are_disjoint_and_continue_after_a_restart(tmp_path: Path) -> None:
    same = ["2021-03-04T05:06:07.890Z"] * 1000
    seen: set[str] = set()
    for _ in range(2):
        with running_app(tmp_path, backfill_identities=2) as c:
            for _ in range(3):
                got = c.post("/v1/ids/snowflake/backfill", json={"times": same}).json()["ids"]
                assert seen.isdisjoint(got)
                seen.update(got)
    assert len(seen) == 6000  # 8,192 per ms on two identities


def test_a_full_millisecond_is_a_409_naming_the_limit_and_nothing_is_handed_out(client) -> None:
    r = client.post("/v1/ids/eight-byte/backfill", json={"times": TIMES[:1] * 300})
    assert r.status_code == 409
    assert "64 IDs per tick" in r.json()["detail"] and "IDMINT_BACKFILL_IDENTITIES" in r.json()["detail"]
    r = client.post("/v1/ids/eight-byte/backfill", json={"times": TIMES[2:3] * 256})
    assert r.status_code == 200
    assert client.post("/v1/ids/eight-byte/backfill", json={"times": TIMES[2:3]}).status_code == 409
    assert client.post("/v1/ids/eight-byte/backfill", json={"times": TIMES[3:4]}).status_code == 200


def test_backfill_of_identity_schemes_is_off_without_a_reserve(tmp_path: Path) -> None:
    with running_app(tmp_path) as c:
        r = c.post("/v1/ids/snowflake/backfill", json={"times": TIMES[:1]})
        assert r.status_code == 409 and "IDMINT_BACKFILL_IDENTITIES is 0" in r.json()["detail"]
        assert c.post("/v1/ids/ulid/backfill", json={"times": TIMES[:1]}).status_code == 200


def now_minus(seconds: float) -> str:
    return rfc3339(datetime.now(UTC) - timedelta(seconds=seconds))


@pytest.mark.parametrize(
    ("scheme", "body", "rule"),
    [
        ("ulid", lambda: {"times": [now_minus(-3600)]}, "times[0] is in the future"),
        (
            "ulid",
            lambda: {"times": [TIMES[0], now_minus(5)]},
            "times[1] is newer than IDMINT_BACKFILL_MIN_AGE (60 s ago)",
        ),
        ("snowflake", {"times": ["2009-01-01T00:00:00Z"]}, "cannot hold a time before the scheme's epoch"),
        (
            "ksuid",
            {"times": ["2014-05-13T16:53:19Z"]},
            "cannot hold a time before the scheme's epoch (2014-05-13T16:53:20.000Z)",
        ),
        (
            "uuidv7",
            {"times": ["1969-12-31T23:59:59.999Z"]},
            "cannot hold a time before the scheme's epoch (1970-01-01T00:00:00.000Z)",
        ),
        ("ulid", {"times": ["1600000000"]}, "times[0] must be an RFC 3339 date-time with Z or an explicit offset"),
        ("ulid", {"times": ["2021-03-04T05:06:07"]}, "must be an RFC 3339 date-time with Z or an explicit offset"),
        ("ulid", {"times": ["2021-03-04"]}, "must be an RFC 3339 date-time"),
        ("ulid", {"times": [1600000000]}, "must be an RFC 3339 date-time"),
        ("ulid", {"times": "2021-03-04T05:06:07Z"}, "times must be a JSON array"),
        ("ulid", {"times": []}, "times must hold 1..10000"),
        ("ulid", {"times": TIMES[:1] * 10_001}, "times must hold 1..10000"),
        ("ulid", {}, "the body must carry times"),
        ("ulid", {"times": TIMES[:1], "count": 2}, "backfill takes times, not count"),
        ("ulid", {"times": TIMES[:1], "format": "base64"}, "format must be one of"),
        ("ulid", {"times": TIMES[:1], "format": "public"}, "format=public is not available for backfill"),
        ("ulid", {"times": TIMES[:1], "mode": "spread"}, "mode applies only to eight-byte"),
        ("ulid", {"times": TIMES[:1], "nope": 1}, "unknown parameter 'nope' for ulid; it takes times, format"),
        ("typeid", {"times": TIMES[:1], "type": "Bad"}, "type:"),
        ("muid", {"times": TIMES[:1]}, "muid does not issue IDs at past times"),
    ],
)
def test_refusals_name_the_rule(client, scheme: str, body: dict | Callable[[], dict], rule: str) -> None:
    if callable(body):  # times relative to now are made when the test runs, not when the module is collected
        body = body()
    r = client.post(f"/v1/ids/{scheme}/backfill", json=body)
    assert r.status_code == 422, r.text
    assert rule in r.json()["detail"]


def test_past_the_end_of_the_id_space(tmp_path: Path) -> None:
    # 20 time bits of 1 ms from the Unix epoch: the layout ended 17 minutes into 1970
    with running_app(tmp_path, backfill_identities=1, snowflake_layout="custom:0:1:20/20/20") as c:
        r = c.post("/v1/ids/snowflake/backfill", json={"times": ["1970-01-01T00:10:00Z", "1971-01-01T00:00:00Z"]})
        assert r.status_code == 422
        detail = r.json()["detail"]
        assert "times[1]: snowflake IDs cannot hold a time past the end of the scheme's ID space" in detail
        assert "20-bit time field ends at 1048576 (Unix ms)" in detail


def test_min_age_is_a_setting(tmp_path: Path) -> None:
    with running_app(tmp_path, backfill_min_age=3600) as c:
        r = c.post("/v1/ids/uuidv7/backfill", json={"times": [now_minus(600)]})
        assert r.status_code == 422 and "(3600 s ago)" in r.json()["detail"]
        assert c.post("/v1/ids/uuidv7/backfill", json={"times": [now_minus(7200)]}).status_code == 200


def test_the_backfill_scope_is_its_own_and_the_metric_counts(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    lines = []
    for name, scopes in (("issuer", '["issue", "stream"]'), ("migrator", '["backfill"]')):
        digest = hashlib.sha256(f"{name}-key".encode()).hexdigest()
        lines.append(f'[[key]]\nname = "{name}"\nsha256 = "{digest}"\nscopes = {scopes}\n')
    keys.write_text("\n".join(lines))
    with running_app(tmp_path / "state", api_keys_file=keys, public_scopes=["metrics"]) as c:
        body = {"times": TIMES[:3]}
        assert c.post("/v1/ids/ulid/backfill", json=body).status_code == 401
        r = c.post("/v1/ids/ulid/backfill", json=body, headers={"Authorization": "Bearer issuer-key"})
        assert r.status_code == 403 and "lacks scope 'backfill'" in r.json()["detail"]
        r = c.post("/v1/ids/ulid/backfill", json=body, headers={"Authorization": "Bearer migrator-key"})
        assert r.status_code == 200
        r = c.get("/v1/ids/ulid", headers={"Authorization": "Bearer migrator-key"})
        assert r.status_code == 403
        assert 'idmint_backfill_ids_total{scheme="ulid"} 3.0' in c.get("/metrics").text


def test_decode_of_a_back_dated_id_says_backfill_and_names_the_node(client) -> None:
    (back,) = client.post("/v1/ids/snowflake/backfill", json={"times": TIMES[:1]}).json()["ids"]
    (live,) = client.get("/v1/ids/snowflake").json()["ids"]
    decoded = client.get(f"/v1/decode/snowflake/{back}").json()
    assert decoded["ledger"]["status"] == "confirmed"
    assert decoded["ledger"]["words"].startswith("backfill: back-dated by ")
    assert decoded["issued_by"]["backfill"] is True
    assert decoded["issued_by"]["owner"]["pid"] == os.getpid()  # the node (in this process) that leased it
    plain = client.get(f"/v1/decode/snowflake/{live}").json()
    assert plain["ledger"]["words"].startswith("issued by ") and "backfill" not in plain["issued_by"]
