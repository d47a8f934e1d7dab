"""Backfill across a restored store, with a real ``idmint serve`` and the real restore tools (a copied state
directory put back; ``pg_dump`` then ``pg_restore --clean``).

Node A back-dates eight-byte IDs into a few past milliseconds; the store is backed up; A back-dates more into the
same milliseconds (sequences above the backed-up marks) and stops; the backup is restored. Node B refuses backfill
of eight-byte (503 naming the change) until ``idmint storage fence --apply``, while UUIDv7 back-dates all along.
After the fence, a time at or before the fence's floor is a 409 naming the fence (the restored marks are below what
A used after the backup: taking them would repeat A's IDs; snowflake alike), and nothing B back-dates repeats an ID
of A."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from app.storage.embedded.history import read_witness
from tests.storage.test_history import CHECK_INTERVAL_S, _cli, _wait
from tests.support.postgres import pg_dump, pg_restore
from tests.support.server import Server, until_available
from tests.support.storage import MARGIN_S, TTL_S

pytestmark = pytest.mark.integration  # real stores, real idmint serve

PAST = ["2021-03-04T05:06:07.890Z", "2021-03-04T05:06:07.891Z", "2019-12-31T23:00:00Z"]
PER_TIME = 20
"""IDs per time and per request: two requests stay within one identity's 64 sequences of a millisecond."""
MIN_AGE_S = 1
FENCE_MARGIN_S = 1.0


def _env(settings: dict[str, str]) -> dict[str, str]:
    return {
        **settings,
        "IDMINT_LEASE_TTL": str(TTL_S),
        "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S),
        "IDMINT_BACKFILL_IDENTITIES": "1",  # one backfill identity: a repeat is a repeat of that very identity
        "IDMINT_BACKFILL_MIN_AGE": str(MIN_AGE_S),
        "IDMINT_HISTORY_CHECK_INTERVAL": str(CHECK_INTERVAL_S),
    }


def _backfill(node: Server, scheme: str, times: list[str]) -> httpx.Response:
    return httpx.post(f"{node.url}/v1/ids/{scheme}/backfill", json={"times": times}, timeout=60)


def _ids(node: Server, times: list[str]) -> list[str]:
    r = until_available(lambda: _backfill(node, "eight-byte", times))  # a first lease may wait (PostgreSQL: a TTL)
    assert r.status_code == 200, r.text
    return list(r.json()["ids"])


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _restore_case(
    tmp_path: Path,
    env: dict[str, str],
    backup: Callable[[], None],
    restore: Callable[[], None],
    moved_on: Callable[[], bool] | None = None,
) -> None:
    times = [t for t in PAST for _ in range(PER_TIME)]
    a = Server(tmp_path, env)
    try:
        a.wait_ready()
        before = _ids(a, times)
        backup()
        after = _ids(a, times)  # sequences above the backed-up marks: the restore loses these marks
        if moved_on is not None:
            _wait(moved_on, "a history round after the backup")
    finally:
        a.stop()
    issued = set(before) | set(after)
    assert len(issued) == 2 * len(times)
    restore()
    b = Server(tmp_path, env)
    c: Server | None = None
    try:
        b.wait("/healthz")
        _wait(lambda: b.get("/readyz").json()["backend"].get("history") == "changed", "B sees the change")
        refused = _backfill(b, "eight-byte", PAST[:1])
        assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1, refused.text
        assert "storage went back in time" in refused.text and "idmint storage fence" in refused.text
        assert _backfill(b, "uuidv7", PAST).status_code == 200  # random bits: no mark, no refusal
        applied = _cli(env, "storage", "fence", "--apply", "--margin", str(FENCE_MARGIN_S))
        assert "fenced: fence" in applied, applied
        fenced_at = time.time()
        _wait(lambda: b.get("/readyz").json()["backend"].get("history") == "unchanged", "B sees the fence")
        # The restored marks are those of the backup: every tick up to the fence's floor counts as full.
        for node in (b, c := Server(tmp_path, env)):
            node.wait_ready()
            for asked in (PAST[:1], times, [PAST[2], _rfc3339(fenced_at - 3600)]):
                r = _backfill(node, "eight-byte", asked)
                assert r.status_code == 409, r.text
                detail = r.json()["detail"]
                assert "storage fence" in detail and "Back-date only times after" in detail, detail
                assert "uuidv7" in detail and "Nothing was issued" in detail, detail
            snowflake = _backfill(node, "snowflake", PAST[:1])
            assert snowflake.status_code == 409 and "storage fence" in snowflake.text, snowflake.text
            assert _backfill(node, "ulid", times).status_code == 200
        # Times after the floor back-date as before, once they are older than IDMINT_BACKFILL_MIN_AGE.
        later = fenced_at + FENCE_MARGIN_S + 1.0
        _wait(lambda: time.time() - MIN_AGE_S > later + 0.5, "a time after the floor is old enough")
        c.stop()  # B then holds the one backfill identity
        fresh = _ids(b, [_rfc3339(later)] * PER_TIME) + _ids(b, [_rfc3339(later)] * PER_TIME)
        print(
            f"restore + fence: {len(issued)} IDs back-dated before it, the old times then refused (409); "
            f"{len(fresh)} back-dated after the floor with {len(issued & set(fresh))} again"
        )
        assert len(set(fresh)) == len(fresh) and not issued & set(fresh)
    finally:
        for started in (b, c):
            if started is not None:
                started.stop()


def test_embedded_state_directory_put_back_then_fenced_never_repeats_a_backfilled_id(tmp_path: Path) -> None:
    state = tmp_path / "state"
    copy = tmp_path / "copy"
    env = _env({"IDMINT_STATE_DIR": str(state)})
    backed_up: list[int] = []

    def backup() -> None:
        backed_up.append(read_witness(state))
        shutil.copytree(state, copy, symlinks=True, ignore=shutil.ignore_patterns("*.tmp*"))

    def restore() -> None:
        shutil.rmtree(state)
        shutil.copytree(copy, state, symlinks=True)

    # A copy is told apart by the history generation too: the node must have raised it (a round, every
    # CHECK_INTERVAL_S) after the copy was taken, as docs/safety.md says.
    _restore_case(tmp_path, env, backup, restore, lambda: read_witness(state) > backed_up[0])


def test_postgres_dump_restored_then_fenced_never_repeats_a_backfilled_id(tmp_path: Path, postgres_db: str) -> None:
    env = _env({"IDMINT_POSTGRES_URL": postgres_db})
    dump = tmp_path / "idmint.dump"

    def backup() -> None:
        pg_dump(postgres_db, dump)

    def restore() -> None:
        pg_restore(postgres_db, dump)

    _restore_case(tmp_path, env, backup, restore)
