"""Three real ``idmint serve`` replicas, on a real etcd, a real PostgreSQL and one state directory, doing
:data:`OPERATIONS` gapless operations (reserve, commit, void) with 10 % of the reservations voided and 5 % abandoned,
while two replicas are SIGKILLed and started again. A soak: 20,000 operations in ``scripts/soak.sh``, 2,000 in the
test command. After the last expiry: the audit log holds every commit once, the committed integers
and the voided ones waiting are exactly ``start..N`` between them, and the next reservations, committed, fill the
waiting ones so that the committed integers are exactly ``start..N``, none twice.

Each run prints its counts (operations, voids, abandoned, expiries, kills, committed, holes), which ``pytest -s``
shows. A client whose replica dies retries its commit or void on another one (both answer a repeat as the first
time); an answer lost with its replica is settled from the audit log, the fleet's record of what happened."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.etcd import EtcdServer
from tests.support.order import soak_size
from tests.support.server import Server, until_available
from tests.test_replicas import etcd_env

pytestmark = [pytest.mark.integration, pytest.mark.soak]  # real processes (and a real etcd); a soak

OPERATIONS = soak_size(20_000, 2_000)
VOID_SHARE = 0.10
ABANDON_SHARE = 0.05
TTL_S = 3
CLIENTS_PER_REPLICA = 4
START = 1000
KILL_AT = (0.3, 0.6)
"""Fractions of the operations at which a replica is SIGKILLed (replica 0, then 1) and started again."""


@dataclass
class Tally:
    """What the clients saw; ``lock`` guards it."""

    operations: int = 0
    committed: set[int] = field(default_factory=set)
    committed_twice: list[int] = field(default_factory=list)
    voided: int = 0
    abandoned: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    """409s by reason: an expired reservation's commit (too slow), an answer settled long ago (lost, retried)."""
    unsure: int = 0
    """Commits whose answer was lost with a replica and whose retry could not say: settled from the audit log."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class Fleet:
    """The replicas' URLs (one replaced when it is started again) and their processes."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp_path, self.env = tmp_path, env
        self.servers = [Server(tmp_path, env) for _ in range(3)]
        for s in self.servers:
            s.wait("/readyz")
        self.kills = 0

    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def kill_and_restart(self, index: int) -> None:
        self.servers[index].kill()
        self.kills += 1
        self.servers[index] = Server(self.tmp_path, self.env)
        self.servers[index].wait("/readyz")

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


def call(
    http: httpx.Client, fleet: Fleet, first: int, method: str, path: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    """One request to the replica ``first`` picks, and to the others in turn while one cannot be reached."""
    last: Exception | None = None
    for attempt in range(60):
        urls = fleet.urls()
        url = urls[(first + attempt) % len(urls)]
        try:
            return http.request(method, url + path, json=body)
        except httpx.TransportError as exc:  # killed, or starting again
            last = exc
            time.sleep(0.05)
    raise AssertionError(f"no replica answered {method} {path}: {last}")


def client(fleet: Fleet, name: str, number: int, tally: Tally, stop: threading.Event) -> None:
    """One client's loop, on its own connection pool (a module-level ``httpx.post`` builds a client, and its TLS
    context, for every request: most of the test's CPU)."""
    with httpx.Client(timeout=30) as http:
        run_client(http, fleet, name, number, tally, stop)


def run_client(http: httpx.Client, fleet: Fleet, name: str, number: int, tally: Tally, stop: threading.Event) -> None:
    rng = random.Random(number)
    base = f"/v1/sequences/{name}"
    while not stop.is_set():
        r = until_available(lambda: call(http, fleet, number, "POST", f"{base}/reserve", {"ttl_s": TTL_S}))
        assert r.status_code == 200, r.text
        reservation, value = r.json()["reservation"], r.json()["value"]
        roll = rng.random()
        with tally.lock:
            tally.operations += 1
        if roll < ABANDON_SHARE:
            with tally.lock:
                tally.abandoned += 1
            continue
        verb = "void" if roll < ABANDON_SHARE + VOID_SHARE else "commit"
        try:
            r = http.post(fleet.urls()[number % 3] + f"{base}/{verb}", json={"reservation": reservation})
            lost = False
        except httpx.TransportError:  # the replica died with the answer: ask another (a repeat answers the same)
            r = call(http, fleet, number + 1, "POST", f"{base}/{verb}", {"reservation": reservation})
            lost = True
        with tally.lock:
            tally.operations += 1
            if r.status_code == 200:
                state = r.json()["state"]
                if state == "committed":
                    if value in tally.committed:
                        tally.committed_twice.append(value)
                    tally.committed.add(value)
                elif state == "voided":
                    tally.voided += 1
            elif r.status_code == 409:
                detail = r.json()["detail"]
                reason = (
                    "expired" if "expired" in detail else "settled long ago" if "not outstanding" in detail else detail
                )
                tally.refused[reason] += 1
                if lost and verb == "commit" and reason != "expired":
                    tally.unsure += 1
            else:
                raise AssertionError(f"{verb}: {r.status_code} {r.text}")


def audit(url: str, name: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if after:
            params["after"] = after
        page = httpx.get(f"{url}/v1/sequences/{name}/audit", params=params, timeout=60).json()
        events += page["events"]
        after = page["next"]
        if after is None:
            return events


def backend(env: dict[str, str]) -> str:
    for name, setting in (
        ("etcd", "IDMINT_ETCD_ENDPOINTS"),
        ("postgres", "IDMINT_POSTGRES_URL"),
        ("mysql", "IDMINT_MYSQL_URL"),
    ):
        if setting in env:
            return name
    return "embedded"


@pytest.fixture(params=["embedded", "etcd", "postgres", "mysql"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    if request.param == "embedded":
        yield {"IDMINT_STATE_DIR": str(tmp_path / "state")}
    elif request.param == "postgres":
        yield request.getfixturevalue("postgres_schema").env()
    elif request.param == "mysql":
        yield request.getfixturevalue("mysql_database").env()
    else:
        etcd: EtcdServer = request.getfixturevalue("etcd_server")
        yield etcd_env(etcd, request.getfixturevalue("etcd_namespace"))


def test_gapless_operations_through_sigkills_leave_no_hole(tmp_path: Path, env: dict[str, str]) -> None:
    fleet = Fleet(tmp_path, env)
    name = "invoices"
    try:
        r = httpx.post(
            f"{fleet.urls()[0]}/v1/sequences",
            json={"name": name, "mode": "gapless", "start": START, "template": "F-{seq:06}"},
            timeout=30,
        )
        assert r.status_code == 201, r.text
        tally = Tally()
        stop = threading.Event()
        errors: list[BaseException] = []

        def run(number: int) -> None:
            try:
                client(fleet, name, number, tally, stop)
            except BaseException as exc:
                errors.append(exc)
                stop.set()

        threads = [threading.Thread(target=run, args=(n,)) for n in range(3 * CLIENTS_PER_REPLICA)]
        started = time.monotonic()
        for t in threads:
            t.start()
        try:
            for index, share in enumerate(KILL_AT):
                while tally.operations < share * OPERATIONS and not stop.is_set():
                    time.sleep(0.05)
                fleet.kill_and_restart(index)
            while tally.operations < OPERATIONS and not stop.is_set():
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(120)
        if errors:
            raise errors[0]
        elapsed = time.monotonic() - started
        url = fleet.urls()[2]
        while (shown := httpx.get(f"{url}/v1/sequences/{name}", timeout=30).json())["gapless"]["outstanding"]:
            time.sleep(0.2)  # the last reservations expire (TTL 3 s) and a node's sweep voids them
        events = audit(url, name)
        kinds = Counter(e["event"] for e in events)
        commits = [e["value"] for e in events if e["event"] == "commit"]
        top = shown["next"]
        assert not tally.committed_twice, f"committed twice: {tally.committed_twice[:10]}"
        assert len(commits) == len(set(commits)) == shown["gapless"]["committed"], "a commit recorded twice"
        assert tally.committed <= set(commits), "a commit a client saw is missing from the audit log"
        assert len(set(commits) - tally.committed) <= tally.unsure + tally.refused["settled long ago"]
        assert all(e["node"] and e["at"] for e in events)
        waiting = sorted(set(range(START, top)) - set(commits))
        assert len(waiting) == shown["gapless"]["voided_waiting"], "an integer is neither committed nor waiting"
        for expected in waiting:  # the voided and expired integers waiting are the next ones reserved
            r = httpx.post(f"{url}/v1/sequences/{name}/reserve", json={}, timeout=30)
            assert r.json()["value"] == expected and r.json()["text"] == f"F-{expected:06d}"
            r = httpx.post(f"{url}/v1/sequences/{name}/commit", json={"reservation": r.json()["reservation"]})
            assert r.status_code == 200, r.text
            commits.append(expected)
        final = httpx.get(f"{url}/v1/sequences/{name}", timeout=30).json()
        holes = sorted(set(range(START, final["next"])) - set(commits))
        assert sorted(commits) == list(range(START, final["next"])) and not holes
        print(
            f"\n{backend(env)}: {tally.operations} operations in "
            f"{elapsed:.1f} s by {len(threads)} clients on 3 replicas, {fleet.kills} SIGKILLs; reservations "
            f"{kinds['reserve']}, voided {kinds['void']} (clients voided {tally.voided}), abandoned "
            f"{tally.abandoned}, expired {kinds['expire']}, commits refused {dict(tally.refused)}, answers settled "
            f"from the audit log {len(set(commits[: len(commits) - len(waiting)]) - tally.committed)}; committed "
            f"{START}..{final['next'] - 1} ({len(commits)} integers, {len(waiting)} of them the voided ones waiting "
            f"at the end); holes {len(holes)}, committed twice {len(commits) - len(set(commits))}"
        )
    finally:
        fleet.stop()
