"""Storage that went back in time is detected and fenced, on each backend with its own restore tools: PostgreSQL
(``pg_dump``, then ``pg_restore --clean`` into the same database), etcd (``etcdctl snapshot save``, ``etcdutl
snapshot restore``, etcd restarted on the restored data directory) and the embedded backend (a copied state
directory put back, whole or file by file).

The case each test plays, with a real ``idmint serve``: node A commits gapless 1..5, takes a ``range`` and issues
eight-byte IDs (one generator ID); the store is backed up; A commits 6..15, takes more ranges and issues more; A
stops and the backup is restored. Node B, its clock behind by :data:`BEHIND_S`, must refuse (503, ``/readyz``
naming the change and the fence command) until ``idmint storage fence --apply``; after it, nothing A handed out is
handed out again: eight-byte IDs (B refuses the raised marks while its clock is behind them), the cached
sequence's ranges (moved by the gap), the gapless numbers (refused until ``idmint sequence setval``). An unchanged
restart is not fenced, and a restore under a running node is seen within the guard's interval."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from app.storage.embedded.history import read_witness
from tests.support.etcd import EtcdServer, find_etcd_binary
from tests.support.mariadb import MysqlDatabase
from tests.support.postgres import PostgresServer, pg_dump, pg_restore
from tests.support.server import Server, clean_environment, run_idmint
from tests.support.storage import MARGIN_S, TTL_S
from tests.test_replicas import ids_of

pytestmark = pytest.mark.integration  # real stores, real idmint serve

BEHIND_S = 30
"""How far node B's clock is behind (ms offset below): far enough to reach back before the backup."""
GAPLESS = "invoices"
CACHED = "orders"
DEADLINE_S = 60.0
CHECK_INTERVAL_S = 0.5
"""The nodes' IDMINT_HISTORY_CHECK_INTERVAL: a round every half second, so a restore under a running node, a round
after a backup and a fence are seen in about that (the rule is the same at the default 5 s)."""


def _env(settings: dict[str, str], **extra: str) -> dict[str, str]:
    return {
        **settings,
        "IDMINT_LEASE_TTL": str(TTL_S),
        "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S),
        "IDMINT_EIGHT_BYTE_POOL": "0-0",  # one generator ID: a repeat is a repeat of that very identity
        "IDMINT_HISTORY_CHECK_INTERVAL": str(CHECK_INTERVAL_S),
        **extra,
    }


def _cli(env: dict[str, str], *args: str) -> str:
    done = run_idmint(args, env={**clean_environment(), **env}, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _wait(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> float:
    """Poll ``condition`` until true; the seconds it took."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < timeout, f"not within {timeout} s: {what}"
        time.sleep(0.05)
    return time.monotonic() - began


def _commit(node: Server) -> int:
    r = httpx.post(f"{node.url}/v1/sequences/{GAPLESS}/reserve", json={}, timeout=30)
    assert r.status_code == 200, r.text
    reserved = r.json()
    c = httpx.post(
        f"{node.url}/v1/sequences/{GAPLESS}/commit", json={"reservation": reserved["reservation"]}, timeout=30
    )
    assert c.status_code == 200, c.text
    return int(reserved["value"])


def _reserve_ok(node: Server) -> bool:
    """Whether a gapless reserve is answered (what it reserved is voided: the next commit takes it again)."""
    r = httpx.post(f"{node.url}/v1/sequences/{GAPLESS}/reserve", json={}, timeout=30)
    if r.status_code != 200:
        return False
    body = {"reservation": r.json()["reservation"]}
    assert httpx.post(f"{node.url}/v1/sequences/{GAPLESS}/void", json=body, timeout=30).status_code == 200
    return True


def _range(node: Server, count: int) -> range:
    r = httpx.post(f"{node.url}/v1/sequences/{CACHED}/range", params={"count": count}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    return range(int(body["first"]), int(body["last"]) + 1)


def _before_backup(node: Server) -> tuple[list[int], list[int], list[bytes]]:
    for body in ({"name": GAPLESS, "mode": "gapless"}, {"name": CACHED, "cache": 10}):
        assert httpx.post(f"{node.url}/v1/sequences", json=body, timeout=30).status_code == 201
    gapless = [_commit(node) for _ in range(5)]
    assert gapless == [1, 2, 3, 4, 5]
    return gapless, list(_range(node, 10)), ids_of(node, "eight-byte", 2000, False)


def _after_backup(node: Server, seconds: float) -> tuple[list[int], list[int], list[bytes]]:
    gapless = [_commit(node) for _ in range(10)]
    assert gapless == list(range(6, 16))
    ranged = [v for _ in range(3) for v in _range(node, 10)]
    ids: list[bytes] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        ids += ids_of(node, "eight-byte", 500, False)
    return gapless, ranged, ids


def _refused(node: Server) -> dict[str, object]:
    """/readyz while the node refuses: the history reason, with every leased and sequence route a 503."""
    ready = node.get("/readyz")
    assert ready.status_code == 503
    body = ready.json()
    reason = body["schemes"]["eight-byte"]["reason"]
    assert "storage went back in time" in reason and "idmint storage fence" in reason, reason
    assert body["backend"]["history"] == "changed"
    r = node.get("/v1/ids/eight-byte")
    assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1
    assert httpx.post(f"{node.url}/v1/sequences/{CACHED}/range", params={"count": 1}, timeout=30).status_code == 503
    assert httpx.post(f"{node.url}/v1/sequences/{GAPLESS}/reserve", json={}, timeout=30).status_code == 503
    assert node.get("/v1/ids/uuidv7").status_code == 200  # nothing leased: still issuing
    return body


def _restore_case(
    tmp_path: Path,
    env: dict[str, str],
    backup: Callable[[], None],
    restore: Callable[[], None],
    moved_on: Callable[[], bool] | None = None,
) -> None:
    """The whole case on one backend (see the module). ``moved_on``: true once the store's history has moved past
    the backup (for a store told apart only by the history record's generation: a history round after the backup,
    which a copy taken within one round of the node's stop does not show, as the docs say)."""
    a = Server(tmp_path, env)
    try:
        a.wait_ready()
        gapless, ranged, ids = _before_backup(a)
        backup()
        more = _after_backup(a, 1.0)  # what the restore forgets: none of it may be issued again
        if moved_on is not None:
            _wait(moved_on, "a history round after the backup")
        gapless, ranged, ids = gapless + more[0], ranged + more[1], ids + more[2]
    finally:
        a.stop()
    restore()
    b = Server(tmp_path, {**env, "IDMINT_CLOCK_OFFSET_MS": str(-BEHIND_S * 1000)})
    c: Server | None = None
    try:
        b.wait("/healthz")
        began = time.monotonic()
        _wait(lambda: b.get("/readyz").json()["backend"].get("history") == "changed", "B sees the change")
        detected = time.monotonic() - began
        _refused(b)
        dry = _cli(env, "storage", "fence")
        assert "CHANGED" in dry and "nothing changed" in dry and "--sequence-gap 1,000,000" in dry, dry
        _refused(b)  # a dry run changes nothing
        applied = _cli(env, "storage", "fence", "--apply", "--sequence-gap", "1000000")  # as docs/storage.md shows it
        assert "fenced: fence" in applied, applied
        _wait(lambda: b.get("/readyz").json()["backend"].get("history") == "unchanged", "B sees the fence")
        # B's clock is behind the raised marks: eight-byte stays refused, naming the fence.
        _wait(lambda: "storage fence raised every high-water mark" in b.get("/v1/ids/eight-byte").text, "fence floor")
        assert b.get("/v1/ids/eight-byte").status_code == 503
        # The cached sequence goes on past the gap; the gapless one waits for setval.
        after_range = list(_range(b, 10))
        assert min(after_range) > max(ranged) and min(after_range) >= 1_000_000
        refused = httpx.post(f"{b.url}/v1/sequences/{GAPLESS}/reserve", json={}, timeout=30)
        assert refused.status_code == 503 and "setval" in refused.text, refused.text
        _cli(env, "sequence", "setval", GAPLESS, str(max(gapless) + 1))
        _wait(lambda: _reserve_ok(b), "gapless reserve after setval (every node re-reads the fence within its round)")
        after_gapless = _commit(b)
        b.stop()
        # A node with a right clock issues after the fence.
        c = Server(tmp_path, env)
        c.wait_ready()
        after_ids = ids_of(c, "eight-byte", 5000, False)
        again_ids = len(set(ids) & set(after_ids))
        again_seq = len(set(ranged) & set(after_range))
        again_gapless = int(after_gapless in gapless)
        print(
            f"restore: detected {detected:.2f} s after B answered; before the fence B issued nothing leased; after "
            f"it: eight-byte {len(after_ids)} IDs with {again_ids} again (of {len(ids)} issued before), ranges "
            f"{len(after_range)} integers with {again_seq} again, gapless next {after_gapless} ({again_gapless} "
            "again)"
        )
        assert again_ids == 0 and again_seq == 0 and after_gapless == max(gapless) + 1
        audit = _cli(env, "sequence", "audit", GAPLESS)
        assert "fence-refused" in audit and "setval" in audit, audit
    finally:
        for node in (b, c):
            if node is not None:
                node.stop()


# -- PostgreSQL -------------------------------------------------------------------------------------------------


def test_postgres_dump_restored_with_clean_is_refused_until_fenced(
    tmp_path: Path, postgres_server: PostgresServer, postgres_db: str
) -> None:
    dbname = postgres_db.rsplit("/", 1)[1]
    env = _env({"IDMINT_POSTGRES_URL": postgres_db})
    dump = tmp_path / "idmint.dump"

    def backup() -> None:
        pg_dump(postgres_db, dump)

    def restore() -> None:
        pg_restore(postgres_db, dump)

    _restore_case(tmp_path, env, backup, restore)
    assert postgres_server.execute("SELECT count(*) FROM idmint.records WHERE name = 'history'", dbname) == [(1,)]


def test_postgres_restart_without_a_restore_is_not_fenced_and_a_restore_under_a_running_node_is_seen(
    tmp_path: Path, postgres_db: str
) -> None:
    env = _env({"IDMINT_POSTGRES_URL": postgres_db})
    dump = tmp_path / "idmint.dump"
    with_node = Server(tmp_path, env)
    try:
        with_node.wait_ready()
        with_node.stop()
        node = Server(tmp_path, env)  # an unchanged restart
        node.wait_ready()
        assert node.get("/readyz").json()["backend"]["history"] == "unchanged"
        pg_dump(postgres_db, dump)
        ids_of(node, "eight-byte", 100, False)
        restored = time.monotonic()
        pg_restore(postgres_db, dump)
        took = _wait(lambda: node.get("/v1/ids/eight-byte").status_code == 503, "the running node stops")
        _wait(lambda: node.get("/readyz").json()["backend"].get("history") == "changed", "readyz names it")
        print(f"restore under a running node (PostgreSQL): refused {took:.2f} s after pg_restore ended")
        assert time.monotonic() - restored < CHECK_INTERVAL_S + DEADLINE_S
        node.stop()
    finally:
        with_node.stop()


# -- MySQL/MariaDB ----------------------------------------------------------------------------------------------


def test_mysql_dump_restored_is_refused_until_fenced(tmp_path: Path, mysql_database: MysqlDatabase) -> None:
    server = mysql_database.server
    env = _env(mysql_database.env())
    dump = tmp_path / "idmint.sql"
    client = ["--no-defaults", "--protocol=TCP", "-h", "127.0.0.1", "-P", str(server.port), "-u", "root"]

    def backup() -> None:
        with dump.open("wb") as out:
            subprocess.run(["mariadb-dump", *client, mysql_database.name], stdout=out, check=True, timeout=120)

    def restore() -> None:  # the dump drops and creates every table: new tables, the rows of the backup
        server.run_script(dump.read_text(), mysql_database.name)

    _restore_case(tmp_path, env, backup, restore)
    assert server.execute("SELECT count(*) FROM records WHERE name = 'history'", mysql_database.name) == [["1"]]


# -- etcd -------------------------------------------------------------------------------------------------------


def test_etcd_snapshot_restored_is_refused_until_fenced(
    tmp_path: Path, etcd_factory: Callable[..., EtcdServer]
) -> None:
    server = etcd_factory()
    env = _env({"IDMINT_ETCD_ENDPOINTS": server.endpoint, "IDMINT_ETCD_NAMESPACE": "fence/"})
    snapshot = tmp_path / "etcd.snapshot"

    def backup() -> None:
        server.etcdctl("snapshot", "save", str(snapshot))

    def restore() -> None:
        server.stop()
        restored = tmp_path / "restored.etcd"
        subprocess.run(
            [str(find_etcd_binary("etcdutl")), "snapshot", "restore", str(snapshot), "--data-dir", str(restored),
             "--name", server.name, "--initial-cluster", f"{server.name}={server.peer_url}",
             "--initial-advertise-peer-urls", server.peer_url],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        shutil.rmtree(server.data_dir)
        os.rename(restored, server.data_dir)
        server.start()

    _restore_case(tmp_path, env, backup, restore)


# -- embedded ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["whole directory", "files into the same directory"])
def test_a_copied_state_directory_put_back_is_refused_until_fenced(tmp_path: Path, how: str) -> None:
    state = tmp_path / "state"
    copy = tmp_path / "copy"
    env = _env({"IDMINT_STATE_DIR": str(state)})

    backed_up: list[int] = []

    def backup() -> None:  # of a running node: a mark's temporary file may vanish while the copy runs
        backed_up.append(read_witness(state))
        shutil.copytree(state, copy, symlinks=True, ignore=shutil.ignore_patterns("*.tmp*"))

    def restore() -> None:
        if how == "whole directory":
            shutil.rmtree(state)
            shutil.copytree(copy, state, symlinks=True)
        else:
            shutil.copytree(copy, state, symlinks=True, dirs_exist_ok=True)

    # Files copied back into the same directory are told apart by the history generation alone: the node must have
    # raised it (a round, every CHECK_INTERVAL_S) after the copy was taken.
    _restore_case(tmp_path, env, backup, restore, lambda: read_witness(state) > backed_up[0])


def test_embedded_restart_without_a_restore_is_not_fenced(tmp_path: Path) -> None:
    env = _env({"IDMINT_STATE_DIR": str(tmp_path / "state")})
    for _ in range(2):
        node = Server(tmp_path, env)
        try:
            node.wait_ready()
            assert node.get("/readyz").json()["backend"]["history"] == "unchanged"
            ids_of(node, "eight-byte", 100, False)
        finally:
            node.stop()
