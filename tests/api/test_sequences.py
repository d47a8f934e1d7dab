"""The sequence routes over the real ASGI app (embedded storage in a temp state dir): contract and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.storage.sequences import MAX_VALUE
from tests.helpers import running_app


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
