"""Admin routes in process (embedded backend): the drain gate on every path that hands out IDs, /readyz, the
admin scope, and one parser per input (422 naming the rule, never a 500)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.test_auth import bearer, entry, key_file
from tests.helpers import running_app


def test_drain_refuses_every_issuing_path_and_keeps_the_rest(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        assert client.post("/v1/sequences", json={"name": "orders"}).status_code == 201
        issued = client.get("/v1/ids/eight-byte").json()["ids"][0]
        r = client.post("/v1/admin/drain")
        assert r.status_code == 200 and r.json()["status"] == "drained"
        assert {c["scheme"] for c in r.json()["released"]} == {"muid", "eight-byte", "hlc-ulid", "siq", "snowflake"}
        assert client.post("/v1/admin/drain").json()["released"] == r.json()["released"]  # once; then the same answer
        refused = [
            client.get("/v1/ids/eight-byte"),  # the raw ASGI fast path
            client.get("/v1/ids/ulid", params={"count": 3, "format": "uuid"}),
            client.post("/v1/ids/snowflake", json={"count": 2}),
            client.get("/v1/ids/muid/stream", params={"count": 10}),
            client.get("/v1/sequences/orders/next"),  # the sequence fast path
            client.post("/v1/sequences/orders/range", params={"count": 5}),
        ]
        for answer in refused:
            assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1, answer.text
            assert "draining" in answer.json()["detail"]
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["status"] == "draining"
        assert client.get("/healthz").status_code == 200
        assert client.get(f"/v1/decode/eight-byte/{issued}").json()["issued_by"]["end"] == "released"
        assert client.get("/v1/sequences/orders").status_code == 200  # reading is not issuing
        assert client.get("/v1/admin/claims").json() == {"claims": []}


@pytest.mark.parametrize(
    ("path", "status", "rule"),
    [
        ("/v1/admin/claims/eight-byte/2048/revoke", 422, "generator_id in 0..2047, got 2048"),
        ("/v1/admin/claims/eight-byte/-1/revoke", 422, "decimal generator_id in 0..2047"),
        ("/v1/admin/claims/eight-byte/1e3/revoke", 422, "decimal generator_id in 0..2047"),
        ("/v1/admin/claims/eight-byte/%EF%BC%91/revoke", 422, "decimal generator_id"),  # a full-width digit
        ("/v1/admin/claims/eight-byte/99999999999999999999999/revoke", 422, "decimal generator_id"),
        ("/v1/admin/claims/wiji/1/revoke", 422, "leases no identity"),
        ("/v1/admin/claims/nope/1/revoke", 404, "unknown scheme"),
        ("/v1/admin/claims/eight-byte/7/revoke", 409, "OS file locks"),  # embedded: stop the process instead
    ],
)
def test_revoke_inputs_are_checked_by_one_parser(tmp_path: Path, path: str, status: int, rule: str) -> None:
    with running_app(tmp_path) as client:
        r = client.post(path)
        assert r.status_code == status and rule in r.json()["detail"], r.text


def test_admin_routes_need_the_admin_scope(tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys.toml", entry("ops", "ops-key", ["admin"]), entry("app", "app-key", ["issue"]))
    with running_app(tmp_path / "state", api_keys_file=keys) as client:
        assert client.get("/v1/admin/claims").status_code == 401
        assert client.post("/v1/admin/drain", headers=bearer("app-key")).status_code == 403
        assert client.get("/v1/admin/claims", headers=bearer("ops-key")).status_code == 200
        assert client.get("/v1/ids/eight-byte", headers=bearer("app-key")).status_code == 200


def test_detection_leads_with_the_reading_the_ledger_confirms(tmp_path: Path) -> None:
    with running_app(tmp_path) as client:
        text = client.get("/v1/ids/siq").json()["ids"][0]
        d = client.get(f"/v1/decode/{text}").json()["candidates"][0]
        assert d["scheme"] == "siq" and d["ledger"]["status"] == "confirmed"
        assert d["ledger"]["words"].startswith("issued by ")
