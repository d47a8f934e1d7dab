"""One fleet, one truth: an identity is keyed by what fixes its IDs' bits, whatever the spelling,
and every replica of a fleet runs the settings the fleet recorded, or claims nothing and says why.

In-process nodes on one real state directory stand in for replicas (the embedded backend's flock is per open file,
so two nodes of one process contend as two processes do); the SIGKILL case runs real ``idmint serve`` processes.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from app.errors import NotReadyError
from app.issuing.holder import SETTINGS_RECORD
from app.issuing.issuer import no_charge
from app.schemes.snowflake.codec import Layout
from tests.helpers import FakeClock, new_node, running_app, started
from tests.support.server import Server

TWITTER_SPELLED = "custom:1288834974657:1:41/10/12"
"""Twitter's layout, bit for bit, spelled as a custom layout."""


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("twitter", "twitter"),
        (TWITTER_SPELLED, "twitter"),
        ("custom:1420070400000:1:41/10/12", "discord"),
        ("custom:1420070400000:1:41/11/11", "custom-1420070400000-1-41-11-11"),
        ("custom:0:10:39/16/8", "custom-0-10-39-16-8"),  # sonyflake's widths, but time/worker/sequence order
    ],
)
def test_a_layout_is_keyed_by_its_bits_not_its_spelling(text: str, key: str) -> None:
    assert Layout.parse(text).key_name == key


@pytest.mark.anyio
async def test_two_spellings_of_one_layout_share_claims_and_marks(tmp_path: Path) -> None:
    """The case of the issue: one replica on ``twitter``, one on the same bits spelled as a custom layout, on one
    state directory: they used to both hold worker 0 and issue the same IDs. Now they hold distinct workers."""
    pool = {"snowflake_pool": "0-1"}
    async with (
        started(new_node(tmp_path, snowflake_layout="twitter", **pool)) as a,
        started(new_node(tmp_path, snowflake_layout=TWITTER_SPELLED, **pool)) as b,
    ):
        held_a = [c.identity for c in a.issuers["snowflake"].holder.claims]
        held_b = [c.identity for c in b.issuers["snowflake"].holder.claims]
        assert len(held_a) == len(held_b) == 1 and set(held_a).isdisjoint(held_b)
        assert {c.key for c in a.issuers["snowflake"].holder.claims}.isdisjoint(
            c.key for c in b.issuers["snowflake"].holder.claims
        )
        ids_a = (await a.issuers["snowflake"].issue(50_000, {}, charge=no_charge)).values()
        ids_b = (await b.issuers["snowflake"].issue(50_000, {}, charge=no_charge)).values()
        assert not set(ids_a) & set(ids_b)
        # A third node finds the two-worker pool full: the spelled layout is the same key space.
        async with started(new_node(tmp_path, snowflake_layout=TWITTER_SPELLED, **pool)) as c:
            with pytest.raises(NotReadyError, match="held by another process"):
                c.issuers["snowflake"].check()


@pytest.mark.anyio
async def test_a_replica_whose_layout_differs_from_the_fleets_claims_nothing_and_names_both(tmp_path: Path) -> None:
    async with started(new_node(tmp_path, snowflake_layout="twitter")) as first:
        first.issuers["snowflake"].check()
        async with started(new_node(tmp_path, snowflake_layout="discord")) as other:
            holder = other.issuers["snowflake"].holder
            assert holder.claims == []
            with pytest.raises(NotReadyError) as info:
                other.issuers["snowflake"].check()
            reason = info.value.reason
            assert "layout discord" in reason and "layout twitter" in reason
            assert "POST /v1/admin/drain" in reason and "/v1/admin/fleet/settings/snowflake" in reason
            assert info.value.retry_after >= 5
            # Every other scheme of that node issues: only the scheme whose settings differ stops.
            other.issuers["hlc-ulid"].check()
    record = (tmp_path / "records" / f"{SETTINGS_RECORD.format(scheme='snowflake')}.json").read_text()
    assert '"layout":"twitter"' in record and '"regions":1' in record


@pytest.mark.anyio
async def test_a_replica_in_another_region_of_one_fleet_claims_nothing(tmp_path: Path) -> None:
    async with started(new_node(tmp_path)) as first:
        first.issuers["eight-byte"].check()
        async with started(new_node(tmp_path, regions=2, region=1)) as other:
            with pytest.raises(NotReadyError, match=r"this node's region 1 of 2 differ from the fleet's region 0 of 1"):
                other.issuers["eight-byte"].check()


def test_the_fleets_settings_change_only_once_no_node_holds_claims_under_them(tmp_path: Path) -> None:
    """The deliberate step: POST /v1/admin/fleet/settings/{scheme} on a node with the new settings is refused
    (409, naming the holder) while a node on the old ones holds claims, and accepted once it stopped."""
    clock = FakeClock.running_from_now()
    old_dir = tmp_path
    with running_app(old_dir, clock, snowflake_layout="twitter") as old:
        assert old.get("/v1/ids/snowflake").status_code == 200
        with running_app(old_dir, clock, snowflake_layout="discord") as new:
            refused = new.get("/v1/ids/snowflake")
            assert refused.status_code == 503 and "layout twitter" in refused.json()["detail"]
            ready = new.get("/readyz")
            assert ready.status_code == 503 and "layout discord" in ready.json()["schemes"]["snowflake"]["reason"]
            r = new.post("/v1/admin/fleet/settings/snowflake")
            assert r.status_code == 409 and "drain" in r.json()["detail"], r.text
    with running_app(old_dir, clock, snowflake_layout="discord") as new:
        r = new.post("/v1/admin/fleet/settings/snowflake")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["before"]["layout"] == "twitter" and body["after"]["layout"] == "discord"
        until_ok = [new.get("/v1/ids/snowflake").status_code for _ in range(200)]
        assert 200 in until_ok
        assert new.post("/v1/admin/fleet/settings/hlc-ulid").status_code == 200  # sliced: region, regions
        assert new.post("/v1/admin/fleet/settings/wiji").status_code == 422  # leases nothing


@pytest.mark.integration
def test_a_respelled_layout_restarted_behind_after_sigkill_does_not_issue_again(tmp_path: Path) -> None:
    """The issue's second case: a node SIGKILLed, restarted with its layout respelled and its clock 10 s behind,
    finds the high-water mark it left (the same key) and issues nothing it issued before."""
    state = tmp_path / "state"
    env = {"IDMINT_STATE_DIR": str(state), "IDMINT_SNOWFLAKE_WORKER_ID": "0", "IDMINT_MAX_CLOCK_WAIT": "30"}
    first = Server(tmp_path, {**env, "IDMINT_SNOWFLAKE_LAYOUT": "twitter"})
    first.wait("/readyz")
    before = set(first.issue("snowflake", 100_000))
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    again = Server(
        tmp_path,
        {**env, "IDMINT_SNOWFLAKE_LAYOUT": TWITTER_SPELLED, "IDMINT_CLOCK_OFFSET_MS": "-10000"},
    )
    try:
        again.wait("/healthz")
        got: list[str] = []
        while len(got) < 100_000:  # it waits (503) until its clock passes the inherited mark
            r = httpx.get(f"{again.url}/v1/ids/snowflake", params={"count": 10_000}, timeout=60)
            if r.status_code == 200:
                got += r.json()["ids"]
            else:
                assert r.status_code == 503, r.text
                time.sleep(0.1)
        assert not before & set(got)
    finally:
        again.stop()
