"""One parser for both issue paths: the fast path (GET) and the FastAPI routes (GET, POST query, POST JSON body)
answer odd input identically, with a 422 naming the rule, never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.api.params import MAX_BODY_BYTES, option_owners
from app.schemes import schemes
from tests.helpers import routed_client, running_app


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("state")) as c:
        yield c


@pytest.fixture(scope="module")
def routed(client: TestClient) -> TestClient:
    return routed_client(client)


def raw_get(c: TestClient, path: str, query: str) -> Any:
    """GET with the query string exactly as written (no re-encoding by the client)."""
    return c.get(f"{path}?{query}")


def raw_post(c: TestClient, path: str, query: str) -> Any:
    return c.post(f"{path}?{query}")


ODD_COUNTS = [
    ("count=%C2%B2", "'²'"),  # superscript two: isdigit() but not int()
    ("count=%D9%A3", "'٣'"),  # Arabic-Indic three: int() reads it
    ("count=+5", "' 5'"),  # '+' is a space in a query
    ("count=%2B5", "'+5'"),  # a sign
    ("count=5.0", "'5.0'"),
    ("count=", "''"),
    ("count=0x10", "'0x10'"),
    ("count=%EF%BC%95", "'５'"),  # fullwidth five
]


@pytest.mark.parametrize(("query", "shown"), ODD_COUNTS)
@pytest.mark.parametrize("path", ["/v1/ids/wiji", "/v1/ids/wiji/stream"])
def test_counts_are_ascii_digits_only_on_every_path(
    client: TestClient, routed: TestClient, query: str, shown: str, path: str
) -> None:
    for r in (raw_get(client, path, query), raw_get(routed, path, query), raw_post(client, path, query)):
        assert r.status_code == 422, (query, r.status_code, r.text)
        assert r.json()["detail"] == f"count must be a whole number written in ASCII digits 0-9, got {shown}"


@pytest.mark.parametrize(
    "body", [{"count": "٣"}, {"count": "+5"}, {"count": True}, {"count": 5.5}, {"count": "²"}, {"count": None}]
)
def test_json_counts_follow_the_same_rule(client: TestClient, body: dict) -> None:
    r = client.post("/v1/ids/wiji", json=body)
    assert r.status_code == 422 and "count must be a whole number" in r.json()["detail"], r.text


def test_json_counts_as_number_or_digits(client: TestClient) -> None:
    for count in (4, "4"):
        r = client.post("/v1/ids/wiji", json={"count": count, "format": "uuid"})
        assert r.status_code == 200 and len(r.json()["ids"]) == 4 and r.json()["format"] == "uuid"


def test_huge_digit_strings_are_refused_quickly(client: TestClient) -> None:
    r = raw_get(client, "/v1/ids/wiji", "count=" + "9" * 5000)
    assert r.status_code == 422 and "at most 18 digits" in r.json()["detail"]


@pytest.mark.parametrize("query", ["bogus=1", "count=2&bogus=1", "Count=2"])
def test_unknown_parameters_are_named(client: TestClient, routed: TestClient, query: str) -> None:
    name = query.split("=")[-2].split("&")[-1]
    for r in (
        raw_get(client, "/v1/ids/wiji", query),
        raw_get(routed, "/v1/ids/wiji", query),
        raw_post(client, "/v1/ids/wiji", query),
    ):
        assert r.status_code == 422
        assert f"unknown parameter {name!r} for wiji" in r.json()["detail"]


def test_an_option_of_other_schemes_says_which(client: TestClient, routed: TestClient) -> None:
    for name, scheme in schemes().items():
        for option in scheme.options:
            others = [s for s in schemes() if s not in option_owners(option.name)]
            for other in others:
                want = f"{option.name} applies only to {', '.join(option_owners(option.name))}, not {other}"
                for r in (
                    client.get(f"/v1/ids/{other}", params={option.name: "x"}),
                    routed.get(f"/v1/ids/{other}", params={option.name: "x"}),
                    client.post(f"/v1/ids/{other}", json={option.name: "x"}),
                ):
                    assert r.status_code == 422 and r.json()["detail"] == want, (name, other, r.text)


def test_a_repeated_parameter_is_refused(client: TestClient, routed: TestClient) -> None:
    for r in (raw_get(client, "/v1/ids/wiji", "count=1&count=2"), raw_get(routed, "/v1/ids/wiji", "count=1&count=2")):
        assert r.status_code == 422 and "count must be given once" in r.json()["detail"]
    r = client.post("/v1/ids/wiji?count=2", json={"count": 3})
    assert r.status_code == 422 and "count given both in the query and in the body" in r.json()["detail"]
    r = client.post("/v1/ids/typeid", content=b'{"count": 2, "type": "_bad", "type": "user"}')
    assert r.status_code == 422 and "type must be given once, got it more than once in the body" in r.text, r.text


@pytest.mark.parametrize(
    "body", [b"[1, 2]", b"not json", b'"count"', b"\xff\xfe", '{"count": 2}'.encode("utf-16"), b"[" * 5000]
)
def test_a_body_must_be_a_json_object(client: TestClient, body: bytes) -> None:
    r = client.post("/v1/ids/wiji", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and "JSON object" in r.json()["detail"]


def test_a_huge_body_is_413_naming_this_routes_limit(client: TestClient) -> None:
    r = client.post("/v1/ids/wiji", content=b" " * (MAX_BODY_BYTES + 1))
    assert r.status_code == 413
    assert r.json()["detail"] == f"request body must be at most {MAX_BODY_BYTES} bytes on this route"


def test_a_number_too_long_to_read_is_named(client: TestClient) -> None:
    r = client.post("/v1/ids/wiji", content=b'{"count": 1' + b"0" * 5000 + b"}")
    assert r.status_code == 422 and "has more than 4300 digits" in r.json()["detail"], r.text


def test_get_and_post_agree_on_every_error(client: TestClient, routed: TestClient) -> None:
    for query in ("count=0", "count=100001", "format=nope", "mode=fast", "type=No-pe", "after=nope"):
        for scheme in schemes():
            answers = {
                (r.status_code, r.text)
                for r in (
                    raw_get(client, f"/v1/ids/{scheme}", query),
                    raw_get(routed, f"/v1/ids/{scheme}", query),
                    raw_post(client, f"/v1/ids/{scheme}", query),
                )
            }
            assert len(answers) == 1, (scheme, query, answers)


def test_decode_options_are_checked(client: TestClient) -> None:
    text = client.get("/v1/ids/wiji").json()["ids"][0]
    r = client.get(f"/v1/decode/wiji/{text}", params={"layout": "discord"})
    assert r.status_code == 422 and "unknown decode option layout for wiji" in r.json()["detail"]
    assert client.get(f"/v1/decode/wiji/{text}").status_code == 200
