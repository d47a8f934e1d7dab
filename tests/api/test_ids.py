"""/v1/ids: issuing over HTTP through the real ASGI app (fast path for GET, FastAPI routes for POST)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.issuing.issuer import Issued
from tests.helpers import SCHEMES, running_app


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with running_app(tmp_path_factory.mktemp("state")) as c:
        yield c


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_issue_three_and_each_decodes_back(client: TestClient, scheme: str, method: str) -> None:
    r = client.request(method, f"/v1/ids/{scheme}", params={"count": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["scheme"] == scheme
    assert len(body["ids"]) == 3 and len(set(body["ids"])) == 3
    for text in body["ids"]:
        d = client.get(f"/v1/decode/{text}")
        assert d.status_code == 200, d.text
        assert scheme in [c["scheme"] for c in d.json()["candidates"]]
        one = client.get(f"/v1/decode/{scheme}/{text}").json()
        assert one["id"] == text  # default format is canonical


def test_get_and_post_answer_the_same_shape(client: TestClient) -> None:
    fast = client.get("/v1/ids/muid", params={"count": 2}).json()
    routed = client.post("/v1/ids/muid", params={"count": 2}).json()
    assert set(fast) == set(routed) == {"scheme", "format", "ids", "bundle"}


# Output forms the scheme's own text rules do not read back (the TypeID spec accepts only prefix_suffix): they
# decode as the scheme named here, to the same timestamp.
READ_AS = {("typeid", "uuid"): "uuidv7"}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_format_decodes_to_the_same_id(client: TestClient, scheme: str) -> None:
    catalogue = {s["name"]: s for s in client.get("/v1/schemes").json()["schemes"]}
    canonical = client.get(f"/v1/ids/{scheme}").json()["ids"][0]
    stamp = client.get(f"/v1/decode/{scheme}/{canonical}").json()["timestamp"]
    for fmt in catalogue[scheme]["formats"]:
        r = client.get(f"/v1/ids/{scheme}", params={"count": 5, "format": fmt})
        assert r.status_code == 200, r.text
        assert r.json()["format"] == fmt
        reader = READ_AS.get((scheme, fmt), scheme)
        for text in r.json()["ids"]:
            d = client.get(f"/v1/decode/{reader}/{text}")
            assert d.status_code == 200, (fmt, text, d.text)
            # issued a moment after the canonical one: same time within a minute (not the same minute: a
            # minute boundary may fall between them)
            gap = datetime.fromisoformat(d.json()["timestamp"]) - datetime.fromisoformat(stamp)
            assert abs(gap.total_seconds()) < 60, (fmt, text, d.json()["timestamp"], stamp)


def test_ids_are_monotonic_per_node(client: TestClient) -> None:
    # Not eight-byte: its default mode (spread) stores the timestamp bit-reversed, so its IDs do not sort.
    for scheme in (s for s in SCHEMES if s != "eight-byte"):
        ids = []
        for _ in range(5):
            ids += client.get(f"/v1/ids/{scheme}", params={"count": 50}).json()["ids"]
        hexes = [client.get(f"/v1/decode/{scheme}/{i}").json()["hex"] for i in ids[::25]]
        assert hexes == sorted(hexes)


def test_muid_bundle_is_offset_zero_of_the_batch(client: TestClient) -> None:
    body = client.get("/v1/ids/muid", params={"count": 4}).json()
    bundle = client.get(f"/v1/decode/muid/{body['bundle']}").json()["fields"]
    offsets = [client.get(f"/v1/decode/muid/{i}").json()["fields"] for i in body["ids"]]
    assert bundle["offset"] == 0
    assert [f["offset"] for f in offsets] == [1, 2, 3, 4]
    assert {f["timestamp_us"] for f in offsets} == {bundle["timestamp_us"]}


def test_eight_byte_modes(client: TestClient) -> None:
    for mode in ("spread", "time_sequential"):
        text = client.get("/v1/ids/eight-byte", params={"mode": mode}).json()["ids"][0]
        assert client.get(f"/v1/decode/eight-byte/{text}").json()["fields"]["mode"] == mode


def test_siq_type(client: TestClient) -> None:
    text = client.get("/v1/ids/siq", params={"type": "group"}).json()["ids"][0]
    assert client.get(f"/v1/decode/siq/{text}").json()["fields"]["qualifier"] == "group"
    text = client.get("/v1/ids/siq").json()["ids"][0]
    assert client.get(f"/v1/decode/siq/{text}").json()["fields"]["qualifier"] == "user"


def test_hlc_ulid_after_sorts_after(client: TestClient) -> None:
    first = client.get("/v1/ids/hlc-ulid").json()["ids"][0]
    decoded = client.get(f"/v1/decode/hlc-ulid/{first}").json()
    # An ID from another publisher, slightly ahead of us (1 s) with a high counter.
    ts = decoded["fields"]["timestamp_ms"] + 1000
    remote = f"{ts:012x}-fff0-ffff-000000000000"
    body = client.get("/v1/ids/hlc-ulid", params={"after": remote, "count": 100}).json()
    remote_hex = client.get(f"/v1/decode/hlc-ulid/{remote}").json()["hex"]
    hexes = [client.get(f"/v1/decode/hlc-ulid/{i}").json()["hex"] for i in body["ids"][::33]]
    assert all(h > remote_hex for h in hexes)


@pytest.mark.parametrize(
    ("path", "params", "status", "fragment"),
    [
        ("/v1/ids/wiji", {"count": 0}, 422, "count must be in 1..100000"),
        ("/v1/ids/wiji", {"count": 100001}, 422, "count must be in 1..100000"),
        ("/v1/ids/wiji", {"count": "ten"}, 422, "count"),
        ("/v1/ids/wiji", {"format": "base64"}, 422, "format must be one of"),
        ("/v1/ids/wiji", {"mode": "spread"}, 422, "mode applies only to eight-byte"),
        ("/v1/ids/eight-byte", {"mode": "fast"}, 422, "mode must be one of spread, time_sequential"),
        ("/v1/ids/siq", {"type": "bogus"}, 422, "user"),
        ("/v1/ids/muid", {"type": "user"}, 422, "type applies only to siq"),
        ("/v1/ids/hlc-ulid", {"after": "nope"}, 422, "after must be an HLC-ULID"),
        ("/v1/ids/uuid7", {}, 404, "unknown scheme 'uuid7'"),
        ("/v1/ids/wiji/stream", {"count": 0}, 422, "count must be in 1..100000000"),
        ("/v1/ids/nope/stream", {}, 404, "unknown scheme"),
    ],
)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_bad_requests_name_the_rule(
    client: TestClient, path: str, params: dict, status: int, fragment: str, method: str
) -> None:
    r = client.request(method, path, params=params)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and fragment in detail


@pytest.mark.parametrize("scheme", SCHEMES)
def test_stream_lines_are_unique_and_valid(client: TestClient, scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    n = 150_000 if scheme != "eight-byte" else 3_000
    issuer = client.app.app.state.node.issuer(scheme)  # type: ignore[attr-defined]  # Front -> FastAPI
    issue = issuer.issue
    chunks: list[Issued] = []

    async def recording(*args: Any, **kwargs: Any) -> Issued:
        chunks.append(await issue(*args, **kwargs))
        return chunks[-1]

    monkeypatch.setattr(issuer, "issue", recording)
    with client.stream("GET", f"/v1/ids/{scheme}/stream", params={"count": n}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain")
        data = b"".join(r.iter_bytes())
    lines = data.split(b"\n")
    assert lines[-1] == b""
    lines = lines[:-1]
    assert len(lines) == n and len(set(lines)) == n
    for text in (lines[0], lines[-1]):
        assert client.get(f"/v1/decode/{scheme}/{text.decode()}").status_code == 200
    # The body is the scalar codec's text of the IDs issued, in the order issued, byte for byte: the stream's
    # column-wise encoders agree with it across every chunk and piece.
    assert sum(chunk.count for chunk in chunks) == n
    assert data == "".join(issuer.scheme.canonical(v) + "\n" for chunk in chunks for v in chunk.values()).encode()


@pytest.mark.integration
@pytest.mark.parametrize("scheme", ["uuidv7", "typeid", "hlc-ulid", "ulid", "wiji"])
def test_large_batches_encoded_in_worker_threads_stay_distinct_and_valid(tmp_path: Path, scheme: str) -> None:
    """Batches of THREAD_ENCODE_MIN IDs or more are encoded in worker threads while the loop generates the next:
    eight concurrent requests over real HTTP give 8 x 20,000 distinct IDs that decode as ``scheme``."""
    import asyncio

    import httpx

    from app.api.issuing import THREAD_ENCODE_MIN
    from tests.support.server import Server

    count = max(20_000, THREAD_ENCODE_MIN)
    replica = Server(tmp_path, {})
    try:
        replica.wait("/readyz")

        async def fetch_all() -> list[list[str]]:
            async with httpx.AsyncClient(base_url=replica.url, timeout=60) as client:
                answers = await asyncio.gather(*(client.get(f"/v1/ids/{scheme}?count={count}") for _ in range(8)))
            return [a.json()["ids"] for a in answers]

        batches = asyncio.run(fetch_all())
        ids = [i for batch in batches for i in batch]
        assert len(ids) == 8 * count == len(set(ids))
        for sample in (ids[0], ids[count - 1], ids[-1]):
            assert httpx.get(f"{replica.url}/v1/decode/{scheme}/{sample}").status_code == 200
    finally:
        replica.stop()


def test_single_snowflakes_spread_over_shards(client: TestClient) -> None:
    """1,000 single IDs issued one by one fall evenly on ``id % 4`` and ``id % 10`` (a new time unit starts
    its sequence at a random slot). The server draws from a CSPRNG (``app.schemes.base.csprng``), so the bound is
    chi-square at p = 1e-6 (a correct generator fails it once in a million runs); the seeded generator test checks
    p = 0.001."""
    values = [int(client.get("/v1/ids/snowflake").json()["ids"][0]) for _ in range(1000)]
    assert len(set(values)) == 1000
    for modulus, critical in ((4, 30.66), (10, 44.81)):  # chi-square, 3 and 9 degrees of freedom, p = 1e-6
        counts = [0] * modulus
        for value in values:
            counts[value % modulus] += 1
        expected = len(values) / modulus
        assert sum((c - expected) ** 2 / expected for c in counts) < critical, (modulus, counts)


@pytest.mark.parametrize("path", ["/v1/ids/nope", "/v1/ids/nope/stream", "/v1/ids/wiji/nope"])
def test_head_of_an_unknown_scheme_is_gets_404_without_its_body(client: TestClient, path: str) -> None:
    """At the ASGI layer itself (the messages the app sends), not only behind a server or client that drops a
    HEAD's body on its own."""

    async def exchange(method: str) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"count=3",
            "root_path": "",
            "headers": [(b"host", b"testserver")],
            "client": ("127.0.0.1", 1),
            "server": ("testserver", 80),
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await client.app(scope, receive, send)
        return sent

    head, get = client.portal.call(exchange, "HEAD"), client.portal.call(exchange, "GET")  # type: ignore[union-attr]
    assert head[0]["status"] == get[0]["status"] == 404
    assert b"".join(m.get("body", b"") for m in head[1:]) == b""
    assert b"".join(m.get("body", b"") for m in get[1:])
