"""Browsers on other origins (``IDMINT_CORS_ORIGINS``), against a real ``idmint serve``: a listed origin's preflight
is answered with the API's methods and the API key's header, and every answer to it carries the CORS headers (the
connection layer's hot path too); another origin's preflight is a 403 and its answers carry none."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import Server

ALLOWED = "http://app.example:8443"
OTHER = "http://evil.example"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    replica = Server(tmp_path_factory.mktemp("cors"), {"IDMINT_CORS_ORIGINS": f"{ALLOWED}, https://second.example"})
    try:
        replica.wait("/readyz")
        yield replica
    finally:
        replica.stop()


def preflight(server: Server, origin: str, path: str = "/v1/ids/wiji") -> httpx.Response:
    headers = {
        "origin": origin,
        "access-control-request-method": "GET",
        "access-control-request-headers": "authorization",
    }
    return httpx.options(server.url + path, headers=headers, timeout=30)


def test_a_listed_origins_preflight_is_answered_with_the_api_key_header_allowed(server: Server) -> None:
    for path in ("/v1/ids/wiji", "/v1/ids/wiji/stream", "/v1/schemes", "/v1/sequences/orders/next"):
        answer = preflight(server, ALLOWED, path)
        assert answer.status_code == 204, (path, answer.text)
        assert answer.headers["access-control-allow-origin"] == ALLOWED
        assert "authorization" in answer.headers["access-control-allow-headers"]
        assert set(answer.headers["access-control-allow-methods"].replace(" ", "").split(",")) == {"GET", "POST"}
        assert answer.headers["vary"] == "origin"


def test_every_answer_to_a_listed_origin_carries_the_cors_headers(server: Server) -> None:
    headers = {"origin": ALLOWED, "authorization": "Bearer anything"}
    # /v1/ids/{scheme} as a plain GET is answered by the connection layer's hot path; the others go through ASGI.
    for path, status in (
        ("/v1/ids/wiji?count=3", 200),
        ("/v1/ids/wiji/stream?count=3", 200),
        ("/v1/schemes", 200),
        ("/v1/ids/nope?count=3", 404),
        ("/v1/ids/wiji?count=0", 422),
    ):
        answer = httpx.get(server.url + path, headers=headers, timeout=30)
        assert answer.status_code == status, (path, answer.text)
        assert answer.headers.get("access-control-allow-origin") == ALLOWED, path
        assert "retry-after" in answer.headers["access-control-expose-headers"]


def test_another_origin_is_refused(server: Server) -> None:
    answer = preflight(server, OTHER)
    assert answer.status_code == 403
    assert "IDMINT_CORS_ORIGINS" in answer.json()["detail"]
    assert "access-control-allow-origin" not in answer.headers
    for path in ("/v1/ids/wiji?count=2", "/v1/schemes"):
        answer = httpx.get(server.url + path, headers={"origin": OTHER}, timeout=30)
        assert answer.status_code == 200
        assert "access-control-allow-origin" not in answer.headers


def test_no_origin_no_cors_headers(server: Server) -> None:
    answer = httpx.get(server.url + "/v1/ids/wiji?count=2", timeout=30)
    assert answer.status_code == 200
    assert "access-control-allow-origin" not in answer.headers
    assert httpx.options(server.url + "/v1/ids/wiji", timeout=30).status_code == 405  # no preflight: as without CORS


def test_schemes_declare_each_forms_longest_id(server: Server) -> None:
    schemes = {s["name"]: s for s in httpx.get(server.url + "/v1/schemes", timeout=30).json()["schemes"]}
    assert schemes["ulid"]["max_lengths"] == {"ulid": 26, "uuid": 36, "hex": 32, "public": 26}
    assert schemes["typeid"]["max_lengths"]["typeid"] == schemes["typeid"]["max_lengths"]["public"] == 63 + 1 + 26
    for scheme in schemes.values():
        assert set(scheme["max_lengths"]) == set(scheme["token_patterns"])
