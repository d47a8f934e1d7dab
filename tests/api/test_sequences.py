"""The sequence routes over the real ASGI app (embedded storage in a temp state dir): contract and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.storage.sequences import MAX_VALUE
from tests.helpers import FakeClock, running_app


def test_create_show_next_range(tmp_path: Path) -> None:
    with running_app(tmp_path) as c:
        r = c.post("/v1/sequences", json={"name": "orders"})
        assert r.status_code == 201
        assert r.json() | {"node": None} == {"name": "orders", "start": 1, "cache": 1000, "next": 1, "node": None}
        assert c.post("/v1/sequences", json={"name": "orders", "start": 1, "cache": 1000}).status_code == 200
        r = c.post("/v1/sequences", json={"name": "orders", "cache": 10})
        assert r.status_code == 409 and "other settings" in r.json()["detail"]

        assert c.get("/v1/sequences/orders/next").json() == {"name": "orders", "ids": [1]}
        assert c.get("/v1/sequences/orders/next", params={"count": 3}).json()["ids"] == [2, 3, 4]
        assert c.post("/v1/sequences/orders/next?count=2").json()["ids"] == [5, 6]
        r = c.post("/v1/sequences/orders/range", params={"count": 2**40})
        assert r.status_code == 200
        body = r.json()
        assert body["last"] - body["first"] + 1 == 2**40 == body["count"] and body["first"] > 6

        shown = c.get("/v1/sequences/orders").json()
        assert shown["next"] == body["last"] + 1
        assert shown["node"]["ranges"][0][0] == 7 and shown["node"]["issued"] == 6
        listed = c.get("/v1/sequences").json()
        assert [s["name"] for s in listed["sequences"]] == ["orders"]
        assert listed["limits"]["max_range_count"] == 2**40 and listed["limits"]["max_value"] == MAX_VALUE

        ids = c.get("/v1/sequences/orders/next", params={"count": 100_000}).json()["ids"]
        assert ids == sorted(set(ids)) and len(ids) == 100_000
        assert ids[993:995] == [1000, body["last"] + 1]  # the rest of the first range, then past the range

        metrics = c.get("/metrics").text
        assert 'idmint_sequence_ids_issued_total{sequence="orders"} 100006.0' in metrics
        assert 'idmint_sequence_ranges_total{kind="range",sequence="orders"} 1.0' in metrics
        assert 'idmint_requests_total{method="GET",route="/v1/sequences/{name}/next",status="200"}' in metrics


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "fragment"),
    [
        ("GET", "/v1/sequences/nope/next", {}, 404, "no sequence named 'nope'"),
        ("POST", "/v1/sequences/nope/range", {}, 404, "no sequence named 'nope'"),
        ("GET", "/v1/sequences/nope", {}, 404, "no sequence named"),
        ("GET", "/v1/sequences/Orders/next", {}, 422, "must match [a-z0-9_-]{1,64}"),
        ("GET", "/v1/sequences/" + "a" * 65 + "/next", {}, 422, "must match"),
        ("GET", "/v1/sequences/orders/next?count=%C2%B2", {}, 422, "ASCII digits"),
        ("GET", "/v1/sequences/orders/next?count=%D9%A3", {}, 422, "ASCII digits"),
        ("GET", "/v1/sequences/orders/next?count=0", {}, 422, "count must be in 1..100000"),
        ("GET", "/v1/sequences/orders/next?count=100001", {}, 422, "count must be in 1..100000"),
        ("GET", "/v1/sequences/orders/next?count=-1", {}, 422, "ASCII digits"),
        ("GET", "/v1/sequences/orders/next?count=", {}, 422, "ASCII digits"),  # as on /v1/ids: no silent 1
        ("GET", "/v1/sequences/orders/next?count=+1", {}, 422, "ASCII digits"),
        ("GET", "/v1/sequences/orders/next?count=1e3", {}, 422, "ASCII digits"),
        ("GET", "/v1/sequences/orders/next?count=" + "9" * 400, {}, 422, "ASCII digits"),
        ("GET", "/v1/sequences/orders/next?count=%FF", {}, 422, "count"),
        ("POST", "/v1/sequences/orders/next?count=%C2%B2", {}, 422, "ASCII digits"),
        ("POST", "/v1/sequences/orders/range?count=1099511627777", {}, 422, "count must be in 1..1099511627776"),
        ("POST", "/v1/sequences/orders/range?count=%EF%BC%95", {}, 422, "ASCII digits"),
        ("POST", "/v1/sequences", {"json": {"name": "Bad Name"}}, 422, "must match"),
        ("POST", "/v1/sequences", {"json": {"name": ""}}, 422, "must match"),
        ("POST", "/v1/sequences", {"json": {"name": "x", "start": -1}}, 422, "start must be in 0..9223372036854775807"),
        ("POST", "/v1/sequences", {"json": {"name": "x", "start": 2**63}}, 422, "start must be in"),
        ("POST", "/v1/sequences", {"json": {"name": "x", "cache": 0}}, 422, "cache must be in 1..1000000"),
        ("POST", "/v1/sequences", {"json": {"name": "x", "cache": "10"}}, 422, "cache"),
        ("POST", "/v1/sequences", {"json": {"name": "x", "cache": 10.5}}, 422, "cache"),
        ("POST", "/v1/sequences", {"json": {"name": "x", "step": 2}}, 422, "step"),
        ("POST", "/v1/sequences", {"content": b"{", "headers": {"content-type": "application/json"}}, 422, ""),
        ("GET", "/v1/sequences/orders/next?count=5&count=6", {}, 422, "count must be given once"),
        ("GET", "/v1/sequences/orders/next?count=5&x=1", {}, 422, "unknown parameter 'x'"),
        ("GET", "/v1/sequences/orders/next?format=STRING", {}, 422, "format must be one of number, string"),
        ("GET", "/v1/sequences/orders/next?format=strings", {}, 422, "format must be one of number, string"),
        ("GET", "/v1/sequences/orders/next?format=", {}, 422, "JavaScript), got ''"),
        ("GET", "/v1/sequences/orders/next?format=string%00", {}, 422, "format must be one of"),
        ("GET", "/v1/sequences/orders/next?format=%EF%BD%93tring", {}, 422, "format must be one of"),
        ("GET", "/v1/sequences/orders/next?format=string&format=number", {}, 422, "format must be given once"),
        ("GET", "/v1/sequences/orders/next?format=string&format=string", {}, 422, "format must be given once"),
        ("GET", "/v1/sequences/orders/next?format=string&count=%D9%A3", {}, 422, "ASCII digits"),
        ("GET", "/v1/sequences/orders/next?Format=string", {}, 422, "unknown parameter 'Format'"),
        ("POST", "/v1/sequences/orders/next?format=STRING", {}, 422, "format must be one of number, string"),
        ("POST", "/v1/sequences/orders/range?format=STRING", {}, 422, "format must be one of number, string"),
        ("POST", "/v1/sequences/orders/range?format=string&format=number", {}, 422, "format must be given once"),
        ("POST", "/v1/sequences/orders/range?count=%C2%B2&format=string", {}, 422, "ASCII digits"),
        ("POST", "/v1/sequences/orders/next?count=5", {"json": {"count": 2}}, 422, "takes no request body"),
        ("POST", "/v1/sequences/orders/range?count=2", {"json": {"count": 2}}, 422, "takes no request body"),
        ("POST", "/v1/sequences/orders/range?count=2&count=3", {}, 422, "count must be given once"),
        ("POST", "/v1/sequences", {"content": b'{"name": "x", "name": "y"}'}, 422, "name must be given once"),
        ("POST", "/v1/sequences", {"content": b'{"name": "x", "start": 1' + b"0" * 5000 + b"}"}, 422, "digits"),
        ("POST", "/v1/sequences", {"content": b"[" * 5000}, 422, "JSON object"),
        ("GET", "/v1/sequences/orders/next?count=5", {"content": b"x"}, 422, "takes no request body"),
        ("POST", "/v1/sequences", {"content": b" " * 20_000}, 413, "at most 16384 bytes on this route"),
    ],
)
def test_bad_input_names_the_rule(
    tmp_path: Path, method: str, path: str, kwargs: dict, status: int, fragment: str
) -> None:
    with running_app(tmp_path) as c:
        assert c.post("/v1/sequences", json={"name": "orders"}).status_code == 201
        r = c.request(method, path, **kwargs)
        assert r.status_code == status, r.text
        assert fragment in r.json()["detail"]
        assert r.headers["x-content-type-options"] == "nosniff"  # the fast path's errors too


def test_a_sequence_named_like_a_verb_is_shown_not_issued(tmp_path: Path) -> None:
    with running_app(tmp_path) as c:
        assert c.post("/v1/sequences", json={"name": "next"}).status_code == 201
        assert c.get("/v1/sequences/next").json()["name"] == "next"
        assert c.get("/v1/sequences/next/next").json() == {"name": "next", "ids": [1]}
        assert c.get("/v1/sequences/orders/next/next").status_code == 404


def test_requests_the_fast_path_hands_over_get_the_same_answers(tmp_path: Path) -> None:
    with running_app(tmp_path) as c:
        c.post("/v1/sequences", json={"name": "orders"})
        assert c.post("/v1/sequences/orders/next?count=2").json()["ids"] == [1, 2]  # FastAPI route (POST)
        assert c.get("/v1/sequences/orders/next?count=2").json()["ids"] == [3, 4]  # fast path
        r = c.post("/v1/sequences/orders/range?count=5")  # fast path
        assert r.status_code == 200 and set(r.json()) == {"name", "first", "last", "count"}
        for query in ("count=0&count=0", "count=0&x=1", "count=0", "count=1&format=STRING", "format=s&format=s"):
            answers = {c.request(m, f"/v1/sequences/orders/next?{query}").json()["detail"] for m in ("GET", "POST")}
            assert len(answers) == 1, answers  # the fast path (GET) and FastAPI (POST) read the query alike
        assert c.get("/v1/sequences/orders/next?count=0").json()["detail"] == "count must be in 1..100000, got 0"


def test_format_string_answers_the_integers_as_json_strings(tmp_path: Path) -> None:
    with running_app(tmp_path) as c:
        c.post("/v1/sequences", json={"name": "big", "start": MAX_VALUE - 100_000, "cache": 10})
        r = c.get("/v1/sequences/big/next", params={"count": 3, "format": "string"})  # fast path
        assert r.json() == {"name": "big", "ids": [str(MAX_VALUE - 100_000 + i) for i in range(3)]}
        assert r.content.startswith(b'{"name":"big","ids":["92233720368546')
        ids = c.post("/v1/sequences/big/next?format=string&count=2").json()["ids"]  # FastAPI route
        assert ids == [str(MAX_VALUE - 100_000 + i) for i in (3, 4)]
        assert c.get("/v1/sequences/big/next?format=number").json()["ids"] == [MAX_VALUE - 100_000 + 5]
        many = c.get("/v1/sequences/big/next", params={"count": 30_000, "format": "string"}).json()["ids"]
        assert [int(i) for i in many] == list(range(int(many[0]), int(many[0]) + 30_000))  # threaded encoding
        assert all(type(i) is str for i in many)
        for method, path in (("POST", "/v1/sequences/big/range"), ("POST", "/v1/sequences/big/range?count=1")):
            body = c.request(method, path, params={"format": "string"}).json()
            assert type(body["first"]) is str and body["first"] == body["last"] and body["count"] == 1
        body = c.post("/v1/sequences/big/range?format=string&count=7").json()
        assert int(body["last"]) - int(body["first"]) + 1 == 7 == body["count"]
        body = c.post("/v1/sequences/big/range?count=7&format=number").json()
        assert type(body["first"]) is int and body["last"] - body["first"] + 1 == 7


def test_overflow_past_the_maximum_is_refused_with_the_rule(tmp_path: Path) -> None:
    with running_app(tmp_path) as c:
        c.post("/v1/sequences", json={"name": "edge", "start": MAX_VALUE - 9, "cache": 4})
        r = c.post("/v1/sequences/edge/range", params={"count": 11})
        assert r.status_code == 422 and "2**63-1" in r.json()["detail"]
        got = []
        for _ in range(3):
            got += c.get("/v1/sequences/edge/next", params={"count": 3}).json()["ids"]
        r = c.get("/v1/sequences/edge/next", params={"count": 3})
        assert r.status_code == 422 and "maximum value 2**63-1" in r.json()["detail"]
        got += c.get("/v1/sequences/edge/next").json()["ids"]
        assert got == list(range(MAX_VALUE - 9, MAX_VALUE + 1))
        r = c.post("/v1/sequences/edge/range")
        assert r.status_code == 422 and "0 remain" in r.json()["detail"]


def test_too_many_sequences_is_a_409(tmp_path: Path) -> None:
    with running_app(tmp_path, max_sequences=2) as c:
        for name in ("a", "b"):
            assert c.post("/v1/sequences", json={"name": name}).status_code == 201
        r = c.post("/v1/sequences", json={"name": "c"})
        assert r.status_code == 409 and "IDMINT_MAX_SEQUENCES" in r.json()["detail"]


def gap_of(app: object) -> float | None:
    return app.app.state.node.metrics.registry.get_sample_value(  # type: ignore[attr-defined]
        "idmint_sequence_gap_total", {"sequence": "orders"}
    )


def test_a_clean_stop_hands_the_unused_range_back_and_the_restart_follows_on(tmp_path: Path) -> None:
    with running_app(tmp_path) as c:
        c.post("/v1/sequences", json={"name": "orders", "cache": 50})
        first = c.get("/v1/sequences/orders/next", params={"count": 10}).json()["ids"]
        stopped = c.app
    with running_app(tmp_path) as c:
        again = c.get("/v1/sequences/orders/next", params={"count": 2}).json()["ids"]  # 4 %: no prefetch
        assert c.post("/v1/sequences/orders/range", params={"count": 5}).json()["first"] == 61
        restarted = c.app
    assert again == [first[-1] + 1, first[-1] + 2] == [11, 12]
    assert gap_of(stopped) == 0
    assert gap_of(restarted) == 48  # 13..60 cannot go back below a client's range reserved since: a gap
    with running_app(tmp_path) as c:
        assert c.get("/v1/sequences/orders/next").json()["ids"] == [66]


# -- business sequences ----------------------------------------------------------------------------------

NOV_27 = 1_795_780_800 * 10**9  # 2026-11-27T12:00Z
INVOICES = {
    "name": "inv",
    "reset": "daily",
    "time_zone": "Europe/Paris",
    "template": "INV-{yyyy}{mm}{dd}-{seq:06}{check}",
    "check_digit": "luhn",
    "cache": 10,
}


def test_a_business_sequence_answers_texts_and_periods_and_parses_them_back(tmp_path: Path) -> None:
    with running_app(tmp_path, FakeClock.from_ns(NOV_27)) as c:
        r = c.post("/v1/sequences", json=INVOICES)
        assert r.status_code == 201, r.text
        assert r.json() | {"node": None} == {
            "name": "inv", "start": 1, "cache": 10, "next": 1, "increment": 1, "reset": "daily",
            "time_zone": "Europe/Paris", "template": INVOICES["template"], "check_digit": "luhn", "mode": "cached",
            "period": "2026-11-27", "node": None,
        }  # fmt: skip
        assert c.post("/v1/sequences", json=INVOICES).status_code == 200
        body = c.get("/v1/sequences/inv/next", params={"count": 2}).json()  # the fast path hands it over
        assert body == {
            "name": "inv", "ids": [1, 2], "text": ["INV-20261127-0000011", "INV-20261127-0000029"],
            "period": "2026-11-27",
        }  # fmt: skip
        assert c.post("/v1/sequences/inv/next?format=string").json()["ids"] == ["3"]  # the FastAPI route
        many = c.get("/v1/sequences/inv/next", params={"count": 6000}).json()  # texts written off the loop
        assert len(many["text"]) == 6000 and many["text"][-1] == f"INV-20261127-{6003:06d}" + many["text"][-1][-1]
        r = c.post("/v1/sequences/inv/range", params={"count": 5})
        assert r.json() | {"first": 0, "last": 0} == {
            "name": "inv",
            "first": 0,
            "last": 0,
            "count": 5,
            "increment": 1,
            "period": "2026-11-27",
        }
        parsed = c.get("/v1/sequences/inv/parse/INV-20261127-0000011").json()
        assert parsed == {
            "name": "inv", "text": "INV-20261127-0000011", "period": "2026-11-27", "value": 1, "check_digit": "luhn",
            "template": INVOICES["template"], "state": "reserved",
        }  # fmt: skip
        r = c.get("/v1/sequences/inv/parse/INV-20261127-0000012")
        assert r.status_code == 422 and "check digit 2 does not match" in r.json()["detail"]
        c.post("/v1/sequences", json={"name": "fv", "reset": "monthly", "template": "FV/{yy}/{mm}/{seq:04}"})
        assert c.get("/v1/sequences/fv/next").json()["text"] == ["FV/26/11/0001"]
        assert c.get("/v1/sequences/fv/parse/FV/26/11/0001").json()["period"] == "2026-11-01"  # '/' in the path
        assert c.get("/v1/sequences/fv/parse/FV/26/11/0002").json()["state"] == "reserved"  # in the node's buffer
        assert c.get("/v1/sequences/fv/parse/FV/26/11/9999").json()["state"] == "unused"


def test_patch_setval_and_delete(tmp_path: Path) -> None:
    with running_app(tmp_path, FakeClock.from_ns(NOV_27)) as c:
        c.post("/v1/sequences", json={"name": "o", "cache": 5})
        assert c.get("/v1/sequences/o/next", params={"count": 2}).json()["ids"] == [1, 2]
        r = c.patch("/v1/sequences/o", json={"increment": 10, "cache": 3})
        assert r.status_code == 200 and (r.json()["increment"], r.json()["cache"]) == (10, 3)
        ranged = c.post("/v1/sequences/o/range", params={"count": 3}).json()
        assert ranged | {"first": 0, "last": 0} == {
            "name": "o",
            "first": 0,
            "last": 0,
            "count": 3,
            "increment": 10,
            "period": None,
        }
        assert ranged["last"] - ranged["first"] == 20
        r = c.post("/v1/sequences/o/setval", json={"next": 5})
        assert r.status_code == 422 and "forward only" in r.json()["detail"]
        assert c.post("/v1/sequences/o/setval", json={"next": 1000}).json() == {
            "name": "o",
            "next": 1000,
            "period": None,
        }
        assert c.post("/v1/sequences/o/range").json()["first"] == 1000
        r = c.patch("/v1/sequences/o", json={"template": "O-{seq}", "mode": "gapless"})
        assert r.status_code == 422 and "unknown member 'mode'" in r.json()["detail"]
        assert c.patch("/v1/sequences/o", json={"template": "O-{seq}"}).json()["template"] == "O-{seq}"
        assert c.get("/v1/sequences/o/next").json()["text"][0].startswith("O-")
        assert c.delete("/v1/sequences/o").json() == {"name": "o", "deleted": True, "generation": 1, "next": 1010}
        assert c.get("/v1/sequences/o").status_code == 404
        assert c.delete("/v1/sequences/o").status_code == 404
        r = c.post("/v1/sequences", json={"name": "o", "template": "O-{seq}7"})  # O-57: old 57, or new 5?
        assert r.status_code == 409 and "could render a number as one of the old ones" in r.json()["detail"]
        assert c.post("/v1/sequences", json={"name": "o"}).json()["next"] == 1010
        assert c.get("/v1/sequences/o/next").json() == {"name": "o", "ids": [1010]}


def test_gapless_over_http(tmp_path: Path) -> None:
    clock = FakeClock.from_ns(NOV_27)
    with running_app(tmp_path, clock) as c:
        c.post("/v1/sequences", json={"name": "g", "mode": "gapless", "template": "G-{seq:03}"})
        for method, path in (("GET", "next"), ("POST", "next"), ("POST", "range")):
            r = c.request(method, f"/v1/sequences/g/{path}")
            assert r.status_code == 409 and "POST /v1/sequences/g/reserve" in r.json()["detail"]
        a = c.post("/v1/sequences/g/reserve", json={"ttl_s": 5}).json()
        assert a | {"reservation": None} == {
            "name": "g", "value": 1, "text": "G-001", "period": None, "reservation": None,
            "expires_at": "2026-11-27T12:00:05.000Z",
        }  # fmt: skip
        b = c.post("/v1/sequences/g/reserve").json()  # no body: the default TTL
        assert b["value"] == 2 and b["expires_at"] == "2026-11-27T12:01:00.000Z"
        assert c.post("/v1/sequences/g/commit", json={"reservation": b["reservation"]}).json()["state"] == "committed"
        clock.advance_s(6)
        r = c.post("/v1/sequences/g/commit", json={"reservation": a["reservation"]})
        assert r.status_code == 409 and "expired before the commit" in r.json()["detail"]
        again = c.post("/v1/sequences/g/reserve").json()
        assert again["value"] == 1  # the expired number is the next one reserved
        r = c.post("/v1/sequences/g/void", json={"reservation": again["reservation"], "reason": "draft cancelled"})
        assert r.json()["state"] == "voided"
        shown = c.get("/v1/sequences/g").json()
        assert shown["gapless"] == {"outstanding": 0, "voided_waiting": 1, "committed": 1} and shown["next"] == 3
        assert c.get("/v1/sequences/g/parse/G-002").json()["state"] == "committed"
        assert c.get("/v1/sequences/g/parse/G-001").json()["state"] == "voided"
        page = c.get("/v1/sequences/g/audit", params={"limit": 3}).json()
        assert [e["event"] for e in page["events"]] == ["reserve", "reserve", "commit"] and page["next"]
        rest = c.get("/v1/sequences/g/audit", params={"after": page["next"]}).json()
        assert [e["event"] for e in rest["events"]] == ["expire", "reserve", "void"] and rest["next"] is None
        assert rest["events"][2]["reason"] == "draft cancelled"
        assert rest["events"][0]["client"] == "testclient"  # expired by the late commit that found it overdue
        assert c.get("/v1/sequences/g/audit", params={"period": "2026-11-27"}).json()["events"] == []
        metrics = c.get("/metrics").text
        for event, n in (("reserve", 3), ("commit", 1), ("void", 1), ("expire", 1)):
            assert f'idmint_sequence_gapless_total{{event="{event}",sequence="g"}} {n}.0' in metrics
        assert 'idmint_sequence_reservations_outstanding{sequence="g"} 0.0' in metrics
        r = c.post("/v1/sequences/g/setval", json={"next": 10})
        assert r.status_code == 409 and "would skip integers" in r.json()["detail"]


def test_a_daily_sequence_rolls_over_at_midnight_in_its_zone_through_http(tmp_path: Path) -> None:
    """Europe/Paris, 29 March 2026 (clocks go 02:00 to 03:00): the day is 23 hours long; its midnight and the next
    are at 23:00 UTC on the 28th and 22:00 UTC on the 29th."""
    clock = FakeClock.from_ns(1_774_738_799 * 10**9)  # 2026-03-28T22:59:59Z: 23:59:59 CET
    with running_app(tmp_path, clock) as c:
        c.post("/v1/sequences", json={"name": "d", "reset": "daily", "time_zone": "Europe/Paris", "start": 100})
        assert c.get("/v1/sequences/d/next").json() == {"name": "d", "ids": [100], "period": "2026-03-28"}
        clock.advance_s(1)
        assert c.get("/v1/sequences/d/next").json() == {"name": "d", "ids": [100], "period": "2026-03-29"}
        clock.advance_s(23 * 3600 - 1)  # 23:59:59 CEST on the 29th
        assert c.get("/v1/sequences/d/next").json()["period"] == "2026-03-29"
        clock.advance_s(1)
        assert c.get("/v1/sequences/d/next").json() == {"name": "d", "ids": [100], "period": "2026-03-30"}


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "fragment"),
    [
        ("POST", "/v1/sequences", {"name": "h", "template": "X{seq}{year}"}, 422, "unknown field {year}"),
        ("POST", "/v1/sequences", {"name": "h", "template": "X" * 10_000 + "{seq}"}, 422, "at most 128 characters"),
        ("POST", "/v1/sequences", {"name": "h", "template": "{seq:099}"}, 422, "{seq:0N}"),
        ("POST", "/v1/sequences", {"name": "h", "template": "{{seq}}"}, 422, "fields do not nest"),
        ("POST", "/v1/sequences", {"name": "h", "template": "A}{seq}"}, 422, "'}' closes no field"),
        ("POST", "/v1/sequences", {"name": "h", "template": "N\u0663{seq}"}, 422, "ARABIC-INDIC DIGIT THREE"),
        ("POST", "/v1/sequences", {"name": "h", "template": "N\uff15{seq}"}, 422, "FULLWIDTH DIGIT FIVE"),
        ("POST", "/v1/sequences", {"name": "h", "template": "A\u202e{seq}"}, 422, "is not printable"),
        ("POST", "/v1/sequences", {"name": "h", "template": "{seq}", "reset": "daily"}, 422, "missing year"),
        ("POST", "/v1/sequences", {"name": "h", "time_zone": "Mars/Olympus"}, 422, "IANA time zone"),
        ("POST", "/v1/sequences", {"name": "h", "increment": 0}, 422, "increment must be"),
        ("POST", "/v1/sequences", {"name": "h", "mode": "strict"}, 422, "mode"),
        ("PATCH", "/v1/sequences/orders", {}, 422, "at least one of"),
        ("PATCH", "/v1/sequences/orders", {"start": 5}, 422, "unknown member 'start'"),
        ("PATCH", "/v1/sequences/orders", {"cache": None}, 422, "cache must be an integer"),
        ("PATCH", "/v1/sequences/orders", {"cache": 0}, 422, "cache must be in 1..1000000"),
        ("PATCH", "/v1/sequences/orders", {"increment": 2**31 + 1}, 422, "increment must be"),
        ("PATCH", "/v1/sequences/orders", {"template": "{seq:6}"}, 422, "{seq:0N}"),
        ("PATCH", "/v1/sequences/nope", {"cache": 5}, 404, "no sequence named"),
        ("POST", "/v1/sequences/orders/setval", {}, 422, "next"),
        ("POST", "/v1/sequences/orders/setval", {"next": -1}, 422, "next must be an integer in 0.."),
        ("POST", "/v1/sequences/orders/setval", {"next": 2**63 + 1}, 422, "next must be"),
        ("POST", "/v1/sequences/orders/setval", {"next": 5, "period": "2026-11-27"}, 422, "has no period"),
        ("POST", "/v1/sequences/orders/reserve", {}, 409, "not gapless"),
        ("POST", "/v1/sequences/g/reserve", {"ttl_s": 0}, 422, "ttl_s must be an integer in 1..3600"),
        ("POST", "/v1/sequences/g/reserve", {"ttl_s": 3601}, 422, "ttl_s must be"),
        ("POST", "/v1/sequences/g/reserve", {"ttl_s": "60"}, 422, "ttl_s"),
        ("POST", "/v1/sequences/g/reserve", {"ttl": 60}, 422, "unknown member 'ttl'"),
        ("POST", "/v1/sequences/g/commit", {}, 422, "reservation"),
        ("POST", "/v1/sequences/g/commit", {"reservation": "nope"}, 422, "reservation must be a reservation ID"),
        ("POST", "/v1/sequences/g/commit", {"reservation": "0123456789abcdef"}, 409, "not outstanding"),
        ("POST", "/v1/sequences/g/commit", {"reservation": "2026-11-27.0123456789abcdef"}, 422, "never resets"),
        ("POST", "/v1/sequences/g/void", {"reservation": "0123456789abcdef", "reason": "x" * 201}, 422, "reason"),
        ("POST", "/v1/sequences/g/void", {"reservation": "0123456789abcdef", "reason": "a\nb"}, 422, "printable"),
        ("GET", "/v1/sequences/g/audit?limit=0", None, 422, "limit must be in 1..1000"),
        ("GET", "/v1/sequences/g/audit?period=yesterday", None, 422, "period must be"),
        ("GET", "/v1/sequences/g/audit?after=%0A", None, 422, "cursor"),
        ("GET", "/v1/sequences/orders/parse/12", None, 422, "has no template"),
        ("GET", "/v1/sequences/g/parse/" + "G" * 10_000, None, 422, "at most"),
        ("GET", "/v1/sequences/g/parse/G-1%C2%B2", None, 422, "not a number of template"),
    ],
)
def test_business_bad_input_names_the_rule(
    tmp_path: Path, method: str, path: str, body: object, status: int, fragment: str
) -> None:
    with running_app(tmp_path) as c:
        assert c.post("/v1/sequences", json={"name": "orders"}).status_code == 201
        assert c.post("/v1/sequences", json={"name": "g", "mode": "gapless", "template": "G-{seq}"}).status_code == 201
        r = c.request(method, path, json=body) if body is not None else c.request(method, path)
        assert r.status_code == status, r.text
        assert fragment in r.json()["detail"]


def test_admin_routes_need_the_admin_scope_and_the_audit_names_the_key(tmp_path: Path) -> None:
    from tests.api.test_auth import bearer, entry, key_file

    keys = key_file(
        tmp_path / "keys.toml",
        entry("boss", "boss-key", ["admin", "sequences"]),
        entry("till", "till-key", ["sequences"]),
    )
    with running_app(tmp_path, api_keys_file=keys) as c:
        boss, till = bearer("boss-key"), bearer("till-key")
        assert c.post("/v1/sequences", json={"name": "g", "mode": "gapless"}, headers=till).status_code == 403
        assert c.post("/v1/sequences", json={"name": "g", "mode": "gapless"}, headers=boss).status_code == 201
        reserved = c.post("/v1/sequences/g/reserve", headers=till).json()
        c.post("/v1/sequences/g/commit", json={"reservation": reserved["reservation"]}, headers=till)
        for method, path, body in (
            ("PATCH", "/v1/sequences/g", {"cache": 5}),
            ("POST", "/v1/sequences/g/setval", {"next": 9}),
            ("DELETE", "/v1/sequences/g", None),
            ("GET", "/v1/sequences/g/audit", None),
        ):
            assert c.request(method, path, json=body, headers=till).status_code == 403, path
        events = c.get("/v1/sequences/g/audit", headers=boss).json()["events"]
        assert [(e["event"], e["key"], e["client"]) for e in events] == [
            ("reserve", "till", "testclient"), ("commit", "till", "testclient")
        ]  # fmt: skip
        assert all(e["node"] for e in events)


def test_sequence_numbers_says_which_sequences_read_a_text(tmp_path: Path) -> None:
    with running_app(tmp_path, FakeClock.from_ns(NOV_27)) as c:
        c.post("/v1/sequences", json={"name": "a", "template": "N-{seq}"})
        c.post("/v1/sequences", json={"name": "b", "template": "N-{seq:03}"})
        c.post("/v1/sequences", json={"name": "plain"})
        c.get("/v1/sequences/b/next")
        answer = c.get("/v1/sequence-numbers/N-001").json()
        assert [(r["name"], r["value"], r["state"]) for r in answer["readings"]] == [("b", 1, "reserved")]
        both = c.get("/v1/sequence-numbers/N-100").json()["readings"]
        assert [(r["name"], r["value"]) for r in both] == [("a", 100), ("b", 100)]
        assert c.get("/v1/sequence-numbers/000S94VR000002M6NWVVR14D2G").json() == {
            "text": "000S94VR000002M6NWVVR14D2G",
            "readings": [],
        }
        assert c.get("/v1/sequence-numbers/" + "N" * 5000).json()["readings"] == []


def test_a_gapless_period_refilled_late_and_delete_with_reservations_open_over_http(tmp_path: Path) -> None:
    clock = FakeClock.from_ns(NOV_27)  # 2026-11-27 12:00 UTC
    with running_app(tmp_path, clock) as c:
        body = {"name": "m", "mode": "gapless", "reset": "daily", "period_grace_s": 3600}
        assert c.post("/v1/sequences", json=body).json()["period_grace_s"] == 3600
        clock.advance_s(12 * 3600 - 60)  # 23:59 on the 27th
        a, b = (c.post("/v1/sequences/m/reserve", json={"ttl_s": 600}).json() for _ in range(2))
        assert c.post("/v1/sequences/m/commit", json={"reservation": b["reservation"]}).status_code == 200
        clock.advance_s(120)  # 00:01 on the 28th: the 27th has ended
        assert c.post("/v1/sequences/m/void", json={"reservation": a["reservation"]}).json()["state"] == "voided"
        holes = c.get("/v1/sequences/m/holes", params={"period": "2026-11-27"}).json()
        assert holes["state"] == "grace" and holes["holes"] == [{"value": 1, "text": None}]
        refill = c.post("/v1/sequences/m/reserve", json={"period": "2026-11-27"}).json()
        assert (refill["value"], refill["period"]) == (1, "2026-11-27")
        r = c.post("/v1/sequences/m/reserve", json={"period": "2026-11"})
        assert r.status_code == 422 and "period must be a period's first day" in r.json()["detail"], r.text
        r = c.delete("/v1/sequences/m")
        assert r.status_code == 409 and "1 reservation(s) open" in r.json()["detail"], r.text
        assert refill["reservation"] in r.json()["detail"]
        assert c.delete("/v1/sequences/m", params={"force": "maybe"}).status_code == 422
        assert c.delete("/v1/sequences/m", params={"force": "true"}).json()["voided"] == 1
        assert c.get("/v1/sequences/m").status_code == 404
        assert c.post("/v1/sequences", json={**body, "name": "n", "period_grace_s": 10**9}).status_code == 422
