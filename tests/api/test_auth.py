"""API keys and quotas: 401/403/429, public scopes and per-key metrics in-process on the injected clock (quotas
refill as the test moves the clock on); stream pacing, SIGHUP reloads and worker shares against a real
``idmint serve``."""

from __future__ import annotations

import concurrent.futures
import hashlib
import hmac
import inspect
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from app.api.access import access_of
from app.api.auth import ApiKeys, Refusal, TokenBucket, load_key_file
from app.api.front import all_routes, route_finder
from app.errors import ConfigError
from app.issuing.issuer import Issuer
from app.main import create_app
from app.sequences import SequenceService
from tests.helpers import FakeClock, make_settings, running_app
from tests.support.raw_http import exchange
from tests.support.server import Server

ISSUER, DECODER, LIMITED, STREAMER, WATCHER = "k-issuer", "k-decoder", "k-limited", "k-streamer", "k-watcher"


def entry(name: str, key: str, scopes: list[str], **quotas: Any) -> str:
    lines = [
        "[[key]]",
        f'name = "{name}"',
        f'sha256 = "{hashlib.sha256(key.encode()).hexdigest()}"',
        "scopes = [" + ", ".join(f'"{s}"' for s in scopes) + "]",
    ]
    lines += [f"{k} = {v}" for k, v in quotas.items()]
    return "\n".join(lines) + "\n\n"


def key_file(path: Path, *entries: str) -> Path:
    path.write_text("".join(entries))
    return path


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("auth")
    keys = key_file(
        tmp / "keys.toml",
        entry(ISSUER, ISSUER, ["issue", "stream"]),
        entry(DECODER, DECODER, ["decode"]),
        entry(LIMITED, LIMITED, ["issue"], requests_per_second=5, ids_per_second=1000),
        entry(STREAMER, STREAMER, ["stream"], ids_per_second=40000, concurrent_streams=1),
        entry(WATCHER, WATCHER, ["metrics"]),
    )
    replica = Server(tmp, {"IDMINT_API_KEYS_FILE": str(keys), "IDMINT_PUBLIC_SCOPES": "decode"})
    try:
        replica.wait("/readyz")
        yield replica
    finally:
        replica.stop()


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, FakeClock]]:
    """The app in-process with the same key file, on a fake clock that stands still unless a test moves it on:
    quotas refill only when a test says so (no sleeping, and no refill while a slow machine runs the requests)."""
    tmp = tmp_path_factory.mktemp("auth-in-process")
    clock = FakeClock.from_ns(time.time_ns())
    keys = key_file(
        tmp / "keys.toml",
        entry(ISSUER, ISSUER, ["issue", "stream"]),
        entry(DECODER, DECODER, ["decode"]),
        entry(LIMITED, LIMITED, ["issue"], requests_per_second=5, ids_per_second=1000),
        entry(WATCHER, WATCHER, ["metrics"]),
    )
    with running_app(tmp, clock, api_keys_file=keys, public_scopes=["decode"]) as client:
        yield client, clock


def test_probes_and_catalogue_need_no_key(keyed: tuple[TestClient, FakeClock]) -> None:
    client, _ = keyed
    for path in ("/healthz", "/readyz", "/v1/schemes", "/openapi.json"):
        assert client.get(path).status_code == 200, path


def test_issue_without_a_key_is_401_with_a_json_reason(keyed: tuple[TestClient, FakeClock]) -> None:
    client, _ = keyed
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer"}):
        r = client.get("/v1/ids/wiji", headers=headers)
        assert r.status_code == 401, headers
        assert r.headers["content-type"] == "application/json"
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["detail"]
    r = client.get("/v1/ids/wiji", headers=bearer(ISSUER))
    assert r.status_code == 200 and len(r.json()["ids"]) == 1


def test_two_authorization_headers_are_refused_whichever_holds_the_key(
    keyed: tuple[TestClient, FakeClock], server: Server
) -> None:
    # Authorization is one field, not a list: a proxy in front may read the other one than this node would. The
    # key is used alone first, so that the node remembers its value (the check's fast path) before the pairs come.
    good, bad = f"Bearer {ISSUER}", "Bearer nope"
    pairs = [(good, bad), (bad, good), (good, good)]
    client, _ = keyed
    assert client.get("/v1/ids/wiji", headers=bearer(ISSUER)).status_code == 200
    for first, second in pairs:
        for path in ("/v1/ids/wiji", "/v1/ids/wiji?count=3", f"/v1/decode/{'0' * 26}"):  # decode: a public scope
            r = client.get(path, headers=[("Authorization", first), ("Authorization", second)])
            assert r.status_code == 401, (path, first, second)
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert "at most one Authorization header, got 2" in r.json()["detail"]
    # The served node, whose connection layer answers GET /v1/ids/wiji itself when it may.
    one = f"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nAuthorization: {good}\r\n\r\n"
    assert exchange(server.port, one.encode())[0].status == 200
    for first, second in pairs:
        two = f"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nAuthorization: {first}\r\nAuthorization: {second}\r\n\r\n"
        (answer,) = exchange(server.port, two.encode())
        assert answer.status == 401 and b"at most one Authorization header" in answer.body, answer.raw[:300]


def test_a_chunked_bodys_trailer_fields_are_not_header_fields(server: Server) -> None:
    # httptools reports trailer fields like header fields; appended to the request's headers they made a second
    # Authorization (or Host) when they came in the same read as the headers, and nothing when they came later.
    # Trailers are not header fields (RFC 9110 section 6.5.1): the answer must not depend on how the bytes arrive.
    head = (
        "POST /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        f"Content-Type: application/json\r\nAuthorization: Bearer {ISSUER}\r\n\r\n"
    ).encode()
    for trailer in (b"Authorization: Bearer nope\r\n", b"Host: y\r\n", b"Authorization: Bearer nope\r\nHost: y\r\n"):
        (answer,) = exchange(server.port, head + b"2\r\n{}\r\n0\r\n" + trailer + b"\r\n")
        assert answer.status == 200, (trailer, answer.raw[:300])
        assert len(json.loads(answer.body)["ids"]) == 1


def test_a_key_without_the_scope_is_403(keyed: tuple[TestClient, FakeClock]) -> None:
    client, _ = keyed
    r = client.get("/v1/ids/wiji", headers=bearer(DECODER))
    assert r.status_code == 403
    assert "lacks scope 'issue'" in r.json()["detail"]
    r = client.get("/v1/ids/wiji/stream?count=3", headers=bearer(LIMITED))
    assert r.status_code == 403 and "'stream'" in r.json()["detail"]


def test_public_scope_serves_the_decode_api_and_page_without_a_key(keyed: tuple[TestClient, FakeClock]) -> None:
    client, _ = keyed
    ids = client.get("/v1/ids/eight-byte?count=1", headers=bearer(ISSUER)).json()["ids"]
    r = client.get(f"/v1/decode/eight-byte/{ids[0]}")
    assert r.status_code == 200 and r.json()["scheme"] == "eight-byte"
    assert client.get("/").status_code == 200
    assert client.post("/v1/decode", json={"text": ids[0]}).status_code == 200


def test_requests_per_second_quota_answers_429_with_retry_after(keyed: tuple[TestClient, FakeClock]) -> None:
    client, clock = keyed
    clock.advance_s(2)  # a full bucket, whatever ran before
    statuses = []
    for _ in range(20):
        r = client.get("/v1/ids/wiji", headers=bearer(LIMITED))
        statuses.append(r.status_code)
        if r.status_code == 429:
            assert int(r.headers["retry-after"]) >= 1
            assert "requests/s" in r.json()["detail"]
    assert statuses.count(200) >= 5 and 429 in statuses
    clock.advance_s(1.2)
    assert client.get("/v1/ids/wiji", headers=bearer(LIMITED)).status_code == 200


def test_ids_per_second_quota_counts_the_batch(keyed: tuple[TestClient, FakeClock]) -> None:
    client, clock = keyed
    clock.advance_s(2)  # refill after the previous test
    assert client.get("/v1/ids/wiji?count=1000", headers=bearer(LIMITED)).status_code == 200
    r = client.get("/v1/ids/wiji?count=500", headers=bearer(LIMITED))  # refilled at 1000/s: not 500 in a moment
    assert r.status_code == 429
    assert "IDs/s" in r.json()["detail"] and int(r.headers["retry-after"]) >= 1


def test_metrics_need_their_scope_and_count_per_key(keyed: tuple[TestClient, FakeClock]) -> None:
    client, clock = keyed
    clock.advance_s(2)
    assert client.get("/metrics").status_code == 401
    assert client.get("/v1/ids/wiji?count=7", headers=bearer(ISSUER)).status_code == 200
    assert client.get("/v1/ids/wiji").status_code == 401
    assert client.get("/v1/ids/wiji", headers=bearer(DECODER)).status_code == 403
    assert 429 in {client.get("/v1/ids/wiji?count=1000", headers=bearer(LIMITED)).status_code for _ in range(3)}
    text = client.get("/metrics", headers=bearer(WATCHER)).text
    assert f'idmint_api_key_requests_total{{key="{ISSUER}",outcome="allowed"}}' in text
    assert 'idmint_api_key_requests_total{key="unknown",outcome="unauthorized"}' in text
    assert f'idmint_api_key_requests_total{{key="{DECODER}",outcome="forbidden"}}' in text
    assert f'idmint_api_key_requests_total{{key="{LIMITED}",outcome="over_quota"}}' in text
    assert 'route="/v1/ids/{scheme}",status="401"' in text  # refusals are counted as requests too
    ids = [line for line in text.splitlines() if line.startswith(f'idmint_api_key_ids_total{{key="{ISSUER}"}}')]
    assert ids and float(ids[0].split()[-1]) >= 7


def test_streams_are_paced_and_capped_per_key(server: Server) -> None:
    started = threading.Event()
    result: dict[str, Any] = {}

    def long_stream() -> None:
        t0 = time.monotonic()
        with httpx.stream(
            "GET", f"{server.url}/v1/ids/wiji/stream?count=100000", headers=bearer(STREAMER), timeout=30
        ) as r:
            result["status"] = r.status_code
            lines = 0
            for chunk in r.iter_bytes():
                started.set()
                lines += chunk.count(b"\n")
            result["lines"] = lines
        result["seconds"] = time.monotonic() - t0

    thread = threading.Thread(target=long_stream)
    thread.start()
    assert started.wait(10)
    second = httpx.get(f"{server.url}/v1/ids/wiji/stream?count=10", headers=bearer(STREAMER))
    assert second.status_code == 429 and "streams" in second.json()["detail"]
    assert second.headers["retry-after"] == "1"
    thread.join(30)
    assert result["status"] == 200 and result["lines"] == 100000
    # 100,000 IDs at 40,000 IDs/s with one second's burst: at least ~1.5 s of pacing.
    assert result["seconds"] >= 1.2, result


@pytest.mark.parametrize("scheme", ["ulid", "siq"])
def test_a_keyed_streams_ids_are_counted_exactly_for_its_key(server: Server, scheme: str) -> None:
    """The stream tells the key layer how many IDs each chunk completes (no newline counting): 300,000 IDs in
    several chunks of several 256 KiB pieces are 300,000 on the key's counter (SIQ: each chunk is several batches,
    sent one after another, the chunk's count on its first piece)."""

    def counted() -> float:
        text = httpx.get(f"{server.url}/metrics", headers=bearer(WATCHER)).text
        found = [line for line in text.splitlines() if line.startswith(f'idmint_api_key_ids_total{{key="{ISSUER}"}}')]
        return float(found[0].split()[-1]) if found else 0.0

    before = counted()
    r = httpx.get(f"{server.url}/v1/ids/{scheme}/stream?count=300000", headers=bearer(ISSUER), timeout=60)
    assert r.status_code == 200 and r.content.count(b"\n") == 300_000
    assert counted() - before == 300_000


@pytest.mark.integration
def test_sighup_reloads_the_key_file_and_a_broken_file_keeps_the_old_keys(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys.toml", entry("first", "first-key", ["issue"]))
    replica = Server(tmp_path, {"IDMINT_API_KEYS_FILE": str(keys)})
    try:
        replica.wait("/readyz")
        url = f"{replica.url}/v1/ids/wiji"
        assert httpx.get(url, headers=bearer("first-key")).status_code == 200
        assert httpx.get(url, headers=bearer("second-key")).status_code == 401

        key_file(keys, entry("second", "second-key", ["issue"]))
        os.kill(replica.pid, signal.SIGHUP)
        deadline = time.monotonic() + 5
        while httpx.get(url, headers=bearer("second-key")).status_code != 200:
            assert time.monotonic() < deadline, replica.log()
            time.sleep(0.05)
        assert httpx.get(url, headers=bearer("first-key")).status_code == 401

        keys.write_text("[[key]]\nname = 'broken'\nsha256 = 'not hex'\nscopes = ['issue']\n")
        os.kill(replica.pid, signal.SIGHUP)
        deadline = time.monotonic() + 5
        while "API keys not reloaded" not in replica.log():
            assert time.monotonic() < deadline, replica.log()
            time.sleep(0.05)
        assert httpx.get(url, headers=bearer("second-key")).status_code == 200
        assert "sha256 must be 64 hex digits" in replica.log()
    finally:
        replica.stop()


def test_a_broken_key_file_stops_start_up_with_the_rule(tmp_path: Path) -> None:
    bad = key_file(tmp_path / "keys.toml", entry("a", "x", ["issue", "fly"]))
    with pytest.raises(ConfigError, match="scopes must be among"):
        load_key_file(bad)
    twice = key_file(tmp_path / "twice.toml", entry("a", "x", ["issue"]), entry("a", "y", ["issue"]))
    with pytest.raises(ConfigError, match="name must be unique"):
        load_key_file(twice)
    with pytest.raises(ConfigError, match="missing.toml"):
        load_key_file(tmp_path / "missing.toml")
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(entry("a", "x", ["issue"]) + "rate = 3\n")
    with pytest.raises(ConfigError, match="rate"):
        load_key_file(unknown)


def test_every_stored_digest_is_compared_in_constant_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"k{i}" for i in range(8)]
    path = key_file(tmp_path / "keys.toml", *(entry(n, f"secret-{n}", ["issue"]) for n in names))
    from app.metrics import Metrics

    middleware = ApiKeys(path, [], Metrics([], "test"))
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)  # the module object app.api.auth calls through
    for presented in ("secret-k0", "secret-k7", "wrong"):
        calls.clear()
        found = middleware.identify(presented.encode())
        assert len(calls) == len(names)  # no early exit on a match, first or last
        assert all(len(a) == len(b) == 32 for a, b in calls)  # digests, never the key text
        assert (found.entry.name if found else None) == {"secret-k0": "k0", "secret-k7": "k7"}.get(presented)


def test_a_value_that_named_a_key_is_remembered_a_wrong_one_never(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.api.auth import REMEMBERED_PER_KEY
    from app.metrics import Metrics

    path = key_file(
        tmp_path / "keys.toml", entry("one", "secret-one", ["issue"]), entry("two", "secret-two", ["issue"])
    )
    middleware = ApiKeys(path, [], Metrics([], "test"))
    compared: list[bytes] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(a)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    auth = [(b"authorization", b"Bearer secret-one")]
    assert middleware.authorise("issue", auth) is middleware.keys[0] and len(compared) == 2
    assert middleware.authorise("issue", auth) is middleware.keys[0] and len(compared) == 2  # remembered
    for _ in range(3):
        with pytest.raises(Refusal):
            middleware.authorise("issue", [(b"authorization", b"Bearer secret-three")])
    assert len(compared) == 2 + 3 * 2 and b"Bearer secret-three" not in middleware.known  # never remembered
    spellings = [b"Bearer  secret-two", b"bearer secret-two", b"BEARER secret-two", b"Bearer secret-two ", b"Bearer\tx"]
    for spelling in spellings[:4]:
        assert middleware.authorise("issue", [(b"authorization", spelling)]) is middleware.keys[1]
    assert len(middleware.known) <= REMEMBERED_PER_KEY * 2
    key_file(path, entry("two", "secret-two", ["issue"]))
    assert middleware.reload() and not middleware.known  # a reload forgets them all: "one" is gone
    with pytest.raises(Refusal):
        middleware.authorise("issue", auth)


def test_every_method_that_hands_out_ids_requires_the_requests_charge() -> None:
    """The ID quota is charged where every issuing path passes (single IDs, batches, streams, the connection layer's
    hot answers, sequences): each method that hands IDs out takes the request's charge, keyword-only and without a
    default, so no route, hot or not, can hand IDs out without naming whom they are charged to."""
    for method in (
        Issuer.issue,
        SequenceService.next,
        SequenceService.next_now,
        SequenceService.reserve_range,
        SequenceService.reserve,
    ):
        charge = inspect.signature(method).parameters["charge"]
        assert charge.kind is inspect.Parameter.KEYWORD_ONLY and charge.default is inspect.Parameter.empty, method


def test_token_bucket_admits_a_large_batch_once_and_then_waits() -> None:
    bucket = TokenBucket(100, clock=FakeClock.from_s(0).seconds)
    assert bucket.take(500, 0.0) == 0.0  # full bucket: admitted, 400 tokens of debt
    assert bucket.take(1, 0.0) == pytest.approx(4.01)
    assert bucket.take(1, 4.02) == 0.0
    assert bucket.charge(150, 5.0) == pytest.approx(0.51)  # 1 + 98 refilled - 150


@pytest.fixture(scope="module")
def find_route(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return route_finder(create_app(make_settings(tmp_path_factory.mktemp("state"))).app)


@pytest.mark.parametrize(
    ("method", "path", "scope", "hands_out_ids"),
    [
        ("GET", "/v1/ids/wiji", "issue", True),
        ("POST", "/v1/ids/siq", "issue", True),
        ("GET", "/v1/ids/muid/stream", "stream", True),
        ("GET", "/v1/decode/x", "decode", False),
        ("GET", "/v1/decode/wiji/x", "decode", False),
        ("POST", "/v1/decode", "decode", False),
        ("GET", "/v1/bounds/uuidv7", "decode", False),
        ("GET", "/", "decode", False),
        ("GET", "/decode", "decode", False),
        ("POST", "/v1/sequences", "admin", False),
        ("GET", "/v1/sequences", "sequences", False),
        ("GET", "/v1/sequences/orders", "sequences", False),
        ("GET", "/v1/sequences/orders/next", "sequences", True),
        ("POST", "/v1/sequences/orders/next", "sequences", True),
        ("POST", "/v1/sequences/orders/range", "sequences", True),
        ("PATCH", "/v1/sequences/orders", "admin", False),
        ("DELETE", "/v1/sequences/orders", "admin", False),
        ("POST", "/v1/sequences/orders/setval", "admin", False),
        ("GET", "/v1/sequences/orders/audit", "admin", False),
        ("GET", "/v1/sequences/orders/holes", "admin", False),
        ("GET", "/v1/sequences/orders/parse/FV/26/11/0007", "sequences", False),
        ("GET", "/v1/sequence-numbers/FV/26/11/0007", "sequences", False),
        ("POST", "/v1/sequences/orders/reserve", "sequences", True),
        ("POST", "/v1/sequences/orders/commit", "sequences", False),
        ("POST", "/v1/sequences/orders/void", "sequences", False),
        ("GET", "/v1/admin/claims", "admin", False),
        ("POST", "/v1/admin/drain", "admin", False),
        ("POST", "/v1/admin/claims/siq/3/revoke", "admin", False),
        ("GET", "/metrics", "metrics", False),
        ("GET", "/healthz", None, False),
        ("GET", "/readyz", None, False),
        ("GET", "/v1/schemes", None, False),
        ("GET", "/v1/fleet", None, False),
        ("GET", "/docs", None, False),
        ("GET", "/openapi.json", None, False),
        ("GET", "/static/app.js", None, False),
        ("GET", "/v1/nothing-here", None, False),
    ],
)
def test_each_route_declares_its_scope_and_whether_it_hands_out_ids(
    find_route: Any, method: str, path: str, scope: str | None, hands_out_ids: bool
) -> None:
    """What the front enforces is what each route declared where it is declared (app.api.access.declare)."""
    _, access = find_route({"type": "http", "method": method, "path": path, "root_path": "", "headers": []})
    assert (access.scope, access.hands_out_ids, access.stream) == (scope, hands_out_ids, scope == "stream")


def test_every_route_that_is_not_declared_is_meant_to_be_open(tmp_path: Path) -> None:
    """A new route that forgets its declaration would be open to everyone: the open ones are listed here."""
    api = create_app(make_settings(tmp_path)).app
    undeclared = {route.path for route in all_routes(api.router.routes) if access_of(route).scope is None}
    assert undeclared == {
        "/healthz",
        "/readyz",
        "/v1/schemes",
        "/v1/fleet",
        "/v1/fleet/members/{token}",
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
        "/static",
        "/static-offline-docs",
    }


def test_the_openapi_document_names_each_operations_scope(tmp_path: Path) -> None:
    document = create_app(make_settings(tmp_path)).app.openapi()
    assert document["paths"]["/v1/ids/{scheme}"]["get"]["x-idmint-scope"] == "issue"
    assert document["paths"]["/v1/ids/{scheme}"]["get"]["x-idmint-hands-out-ids"] is True
    assert document["paths"]["/v1/ids/{scheme}/stream"]["post"]["x-idmint-scope"] == "stream"
    assert "x-idmint-scope" not in document["paths"]["/healthz"]["get"]


def test_public_scopes_setting_is_validated(tmp_path: Path) -> None:
    from pydantic import ValidationError

    assert make_settings(tmp_path, public_scopes="decode, metrics").public_scopes == ["decode", "metrics"]
    with pytest.raises(ValidationError, match="public_scopes must be among"):
        make_settings(tmp_path, public_scopes="decode,everything")


@pytest.mark.integration
def test_ids_per_second_counts_a_post_body_count(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys.toml", entry("poster", "poster-key", ["issue"], ids_per_second=1000))
    replica = Server(tmp_path, {"IDMINT_API_KEYS_FILE": str(keys)})
    try:
        replica.wait("/readyz")
        with httpx.Client(base_url=replica.url, headers=bearer("poster-key")) as client:
            assert client.post("/v1/ids/wiji", json={"count": 1000}).status_code == 200
            r = client.post("/v1/ids/wiji", json={"count": 500})
            assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
            assert "IDs/s" in r.json()["detail"]
    finally:
        replica.stop()


@pytest.mark.integration
def test_a_count_the_route_refuses_costs_the_key_nothing(tmp_path: Path) -> None:
    """IDs are charged once the route has parsed a valid count: ``count=²`` and counts over the maximum are 422s
    (JSON, never a 500) and leave the key's IDs/s bucket untouched (a count of 10**18 once locked a key out for
    31 million years), while a valid count is still charged."""
    keys = key_file(
        tmp_path / "keys.toml",
        entry("quota", "quota-key", ["issue", "stream", "sequences", "admin"], ids_per_second=1000),
    )
    replica = Server(tmp_path, {"IDMINT_API_KEYS_FILE": str(keys)})
    try:
        replica.wait("/readyz")
        with httpx.Client(base_url=replica.url, headers=bearer("quota-key"), timeout=30) as client:
            assert client.post("/v1/sequences", json={"name": "orders"}).status_code == 201
            refused = [
                "/v1/ids/wiji?count=%C2%B2",
                "/v1/ids/wiji/stream?count=%C2%B2",
                "/v1/sequences/orders/next?count=%C2%B2",
                "/v1/ids/wiji?count=" + "9" * 5000,
                "/v1/ids/wiji?count=999999999999999999",
                "/v1/ids/wiji/stream?count=999999999999999999",
                "/v1/sequences/orders/next?count=999999999999999999",
                "/v1/ids/wiji?count=100001",
            ]
            for path in refused:
                r = client.get(path)
                assert r.status_code == 422, (path, r.status_code, r.text[:200])
                assert r.headers["content-type"] == "application/json" and r.json()["detail"], path
            r = client.post("/v1/ids/wiji", json={"count": 10**18})
            assert r.status_code == 422, r.text
            assert client.get("/v1/ids/wiji?count=900").status_code == 200  # the bucket was not charged above
            r = client.get("/v1/sequences/orders/next?count=900")
            assert r.status_code == 429 and "IDs/s" in r.json()["detail"]  # but this one was
    finally:
        replica.stop()


@pytest.mark.integration
def test_range_is_charged_to_the_keys_ids_quota(tmp_path: Path) -> None:
    keys = key_file(
        tmp_path / "keys.toml", entry("ranger", "ranger-key", ["sequences", "admin", "metrics"], ids_per_second=1000)
    )
    replica = Server(tmp_path, {"IDMINT_API_KEYS_FILE": str(keys)})
    try:
        replica.wait("/readyz")
        with httpx.Client(base_url=replica.url, headers=bearer("ranger-key"), timeout=30) as client:
            assert client.post("/v1/sequences", json={"name": "orders"}).status_code == 201
            for too_many in (2**40, 1001):  # more than one second of the quota: a 422 naming it, charged nothing
                r = client.post(f"/v1/sequences/orders/range?count={too_many}")
                assert r.status_code == 422, r.text
                assert "at most 1000 for API key 'ranger'" in r.json()["detail"]
            assert client.post("/v1/sequences/orders/range?count=1000").status_code == 200
            for path in ("/v1/sequences/orders/range?count=1000", "/v1/sequences/orders/next?count=1000"):
                r = client.post(path)  # the range took the second's worth
                assert r.status_code == 429 and "IDs/s" in r.json()["detail"], r.text
            metrics = client.get("/metrics").text
        assert 'idmint_api_key_ids_total{key="ranger"} 1000.0' in metrics
    finally:
        replica.stop()


BURST = 50
"""Requests sent at once by the two-worker quota test."""


@pytest.mark.integration
def test_with_two_workers_a_key_gets_its_quota_once(tmp_path: Path) -> None:
    """``--workers 2``: each worker holds half of every rate and half of the stream slots, so the key's quotas
    hold across the server (a worker may refuse while the other has room: never more than the quota)."""
    keys = key_file(
        tmp_path / "keys.toml",
        entry("pair", "pair-key", ["issue", "stream"], requests_per_second=10, concurrent_streams=2),
    )
    replica = Server(tmp_path, {"IDMINT_API_KEYS_FILE": str(keys)}, "--workers", "2")
    try:
        replica.wait("/readyz", timeout=60)
        # Fresh connections, so both workers take requests; at 10/s the key may have 10 at once plus what refills.
        # Sent in bursts of 50 at once until one is refused: one at a time, a busy machine sent them more slowly
        # than the buckets refill, and none was ever refused.
        started = time.monotonic()
        answers: list[httpx.Response] = []
        with concurrent.futures.ThreadPoolExecutor(BURST) as pool:
            while not any(r.status_code == 429 for r in answers) and len(answers) < 1000:
                answers += pool.map(
                    lambda _: httpx.get(f"{replica.url}/v1/ids/wiji", headers=bearer("pair-key"), timeout=60),
                    range(BURST),
                )
        elapsed = time.monotonic() - started
        allowed = sum(r.status_code == 200 for r in answers)
        refused = [r for r in answers if r.status_code == 429]
        assert allowed + len(refused) == len(answers)
        assert allowed <= 10 + 10 * elapsed + 1, (allowed, elapsed)
        assert "each of the 2 workers holds 1/2" in refused[0].json()["detail"]
        # Streams: 2 for the key, one per worker; never-reading clients hold theirs.
        time.sleep(1.1)  # let the request bucket refill (the quota under test is the stream cap)
        held = []
        statuses = []
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", replica.port), timeout=30)
            sock.sendall(
                b"GET /v1/ids/wiji/stream?count=100000000 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer pair-key\r\n\r\n"
            )
            statuses.append(int(sock.recv(64).split()[1]))
            held.append(sock)
        for sock in held:
            sock.close()
        assert statuses.count(200) <= 2, statuses
    finally:
        replica.stop()


@pytest.mark.integration
def test_a_stream_cap_the_workers_cannot_share_stops_start_up(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys.toml", entry("one", "one-key", ["stream"], concurrent_streams=1))
    replica = Server(tmp_path, {"IDMINT_API_KEYS_FILE": str(keys)}, "--workers", "2")
    try:
        assert replica.proc.wait(60) != 0
        assert "concurrent_streams must be 0 or at least the number of worker processes (2" in replica.log()
    finally:
        replica.stop()
