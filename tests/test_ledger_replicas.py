"""The claim ledger across real replicas on a real etcd or PostgreSQL: every ID decodes to the process that issued
it.

Real ``idmint serve`` processes (tests/helpers.py ``Server``) on the session's etcd or PostgreSQL, short lease TTL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.schemes import get_scheme
from app.schemes.eight_byte import pack
from tests.helpers import CLAIMING
from tests.support.server import Server
from tests.support.storage import TTL_S, Store
from tests.test_replicas import identities, replicas

pytestmark = pytest.mark.integration  # real replicas and etcd or PostgreSQL (the store fixture: once per backend)

IDS_PER_SCHEME = 40


def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def issue(replica: Server) -> dict[str, list[str]]:
    out = {}
    for scheme in CLAIMING:
        r = replica.get_available(f"/v1/ids/{scheme}", count=IDS_PER_SCHEME)
        assert r.status_code == 200, r.text
        out[scheme] = r.json()["ids"]
    return out


def decoded(replica: Server, texts: list[str]) -> list[list[dict[str, Any]]]:
    """POST /v1/decode of ``texts`` (one per line): each item's candidates."""
    r = httpx.post(f"{replica.url}/v1/decode", json={"text": "\n".join(texts)}, timeout=60)
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert len(items) == len(texts)
    return [item["candidates"] for item in items]


def pids_of(replica: Server, scheme: str, texts: list[str]) -> list[int | None]:
    out = []
    for candidates in decoded(replica, texts):
        reading = next(c for c in candidates if c["scheme"] == scheme)
        out.append(reading["issued_by"]["owner"]["pid"] if reading["issued_by"] else None)
    return out


def test_every_id_decodes_to_the_replica_that_issued_it_through_a_sigkill(tmp_path: Path, store: Store) -> None:
    env = store.env()
    with replicas(tmp_path, 3, env) as nodes:
        issued: list[tuple[int, dict[str, list[str]]]] = [(r.pid, issue(r)) for r in nodes]
        dead = nodes[0]
        held = identities(dead)
        dead.kill()
        static = {
            "IDMINT_EIGHT_BYTE_GENERATOR_ID": str(held["eight-byte"][0]),
            "IDMINT_MUID_MEDALLION": str(held["muid"][0]),
            "IDMINT_HLC_ULID_PUBLISHER_ID": str(held["hlc-ulid"][0]),
            "IDMINT_SIQ_SHARD": str(held["siq"][0]),
            "IDMINT_SNOWFLAKE_WORKER_ID": str(held["snowflake"][0]),
        }
        heir = Server(tmp_path, {**env, **static})
        try:
            heir.wait("/readyz", 200, timeout=TTL_S * 4 + 15)
            now_held = identities(heir)
            assert all(now_held[s] == held[s] for s in CLAIMING), (now_held, held)  # it took the dead one's
            issued.append((heir.pid, issue(heir)))
            issued.extend((r.pid, issue(r)) for r in nodes[1:])
            asker = nodes[1]
            for pid, by_scheme in issued:
                for scheme, texts in by_scheme.items():
                    assert pids_of(asker, scheme, texts) == [pid] * len(texts), (scheme, pid)
            # Single-ID decode says the same, and the dead replica's claim is closed as lost (by a live node's sweep).
            first_dead = issued[0][1]["eight-byte"][0]

            def dead_record() -> dict[str, Any] | None:
                d = asker.get(f"/v1/decode/eight-byte/{first_dead}").json()
                assert d["issued_by"]["owner"]["pid"] == dead.pid
                return d if d["issued_by"]["end"] == "lost" else None

            d = until(dead_record, TTL_S * 4, "the dead replica's claim ended as lost")
            assert d["ledger"]["status"] == "confirmed" and "(lost)" in d["ledger"]["words"]
            heirs = asker.get(f"/v1/decode/eight-byte/{issued[3][1]['eight-byte'][0]}").json()["issued_by"]
            assert d["issued_by"]["ended_at_ns"] <= heirs["claimed_at_ns"]
        finally:
            heir.stop()


def test_ids_no_claim_covers_are_flagged_with_their_reason(tmp_path: Path, store: Store) -> None:
    env = store.env(IDMINT_EIGHT_BYTE_POOL="0-9")
    scheme = get_scheme("eight-byte")
    with replicas(tmp_path, 1, env) as (node,):
        now_ms = time.time_ns() // 1_000_000  # after the fleet's ledger began
        forged = {
            "no_claim": pack(now_ms, 0, 2000, 0),  # an identity no node of this fleet ever claimed
            "future": pack(now_ms + 3600_000, 0, 0, 0),
            "before_ledger": pack(now_ms - 3600_000, 0, 0, 0),
        }
        for status, value in forged.items():
            d = node.get(f"/v1/decode/eight-byte/{scheme.canonical(value)}").json()
            assert d["issued_by"] is None
            assert d["ledger"]["status"] == status, d
            assert d["ledger"]["reason"] in {
                "no claim of this identity at that time",
                "timestamp in the future",
                "the ledger does not reach back that far",
            }
        # A claimed identity, at a time after its claim ended (the holder stopped cleanly).
        gone = Server(tmp_path, env)
        try:
            gone.wait("/readyz")
            identity = identities(gone)["eight-byte"][0]
        finally:
            gone.stop()
        late = scheme.canonical(pack(time.time_ns() // 1_000_000, 0, identity, 0))
        d = until(
            lambda: (d := node.get(f"/v1/decode/eight-byte/{late}").json())["ledger"]["status"] == "no_claim" and d,
            5,
            "an ID after its identity's claim ended is flagged",
        )
        assert d["issued_by"] is None and d["plausibility"]["rank"] == 1
        # Readings of one ID come ordered by plausibility: the one the ledger confirms first, the rest last.
        text = node.get("/v1/ids/snowflake", format="decimal").json()["ids"][0]
        candidates = node.get(f"/v1/decode/{text}").json()["candidates"]
        assert candidates[0]["scheme"] == "snowflake" and candidates[0]["plausibility"]["rank"] == 0
        assert [c["plausibility"]["rank"] for c in candidates] == sorted(c["plausibility"]["rank"] for c in candidates)
        assert all(c["plausibility"]["rank"] == 2 for c in candidates[1:]), candidates
