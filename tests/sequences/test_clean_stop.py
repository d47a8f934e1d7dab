"""A clean stop hands the unused range back, on real ``idmint serve`` processes over the state
directory, a real etcd and a real PostgreSQL: after SIGTERM the next node's first integer follows the last one
issued; when another node reserved since, the range stays a gap; under load with stops and restarts no integer is
issued twice; SIGKILL still loses the range (nothing runs to hand it back), and the gap is measured.

Each test prints what it measured (integers lost per stop), which ``pytest -s`` shows."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from app.sequences.buffer import HAND_BACK_TIMEOUT_S
from tests.sequences.support import SEQUENCES, Served, check, create, run_clients, wait_served
from tests.support.server import Server
from tests.support.storage import Store, store_for

pytestmark = pytest.mark.integration  # real processes (and a real etcd or PostgreSQL)

CACHE = 1000
CLIENTS_PER_REPLICA = 6


@pytest.fixture(params=["embedded", "etcd", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of every node of one test: one shared state directory, one etcd namespace, or one
    PostgreSQL database."""
    if request.param == "embedded":
        yield {"IDMINT_STATE_DIR": str(tmp_path / "state")}
    else:
        yield store_for(request, request.param).env()


def start(tmp_path: Path, env: dict[str, str]) -> Server:
    node = Server(tmp_path, env)
    node.wait("/readyz")
    return node


def next_ids(node: Server, count: int, name: str = "orders") -> list[int]:
    r = httpx.get(f"{node.url}/v1/sequences/{name}/next", params={"count": count}, timeout=30)
    assert r.status_code == 200, r.text
    ids: list[int] = r.json()["ids"]
    return ids


def terminate(node: Server) -> str:
    """SIGTERM and wait for the clean exit (uvicorn runs the lifespan's shutdown, then exits by the signal it got);
    the node's log."""
    node.proc.send_signal(signal.SIGTERM)
    try:
        status = node.proc.wait(timeout=30)
    finally:
        node.stop()  # closes the log file (and kills a node that did not stop)
    log = node.log()
    assert status in (0, -signal.SIGTERM) and "Application shutdown complete." in log, log
    return log


def test_a_clean_stop_hands_the_range_back_and_the_next_node_follows_on(tmp_path: Path, env: dict[str, str]) -> None:
    a = start(tmp_path, env)
    try:
        create(a.url, cache=CACHE)
        issued = [i for count in (1, 3, 2, 5, 1) for i in next_ids(a, count)]  # 12 of 1,000: no prefetch
        assert issued == list(range(1, 13))
    finally:
        log = terminate(a)
    assert "988 unused integers handed back at stop, 0 dropped (gap)" in log, log
    b = start(tmp_path, env)
    try:
        first = next_ids(b, 1)[0]
        assert first == issued[-1] + 1, f"the next node started at {first}, not after {issued[-1]}"
        print(f"integers lost by a clean stop after 12 next calls: {first - issued[-1] - 1} (cache {CACHE})")
    finally:
        b.stop()


def test_a_range_reserved_since_keeps_it_a_gap_and_two_nodes_never_repeat(tmp_path: Path, env: dict[str, str]) -> None:
    a = start(tmp_path, env)
    b = start(tmp_path, env)
    c: Server | None = None
    try:
        create(a.url, cache=CACHE)
        from_a = next_ids(a, 3)  # a holds 1..1000
        from_b = next_ids(b, 4)  # b holds 1001..2000, the latest reservation
        assert (from_a, from_b) == ([1, 2, 3], [1001, 1002, 1003, 1004])
        log_a = terminate(a)  # below b's range: cannot go back
        assert "0 unused integers handed back at stop, 997 dropped (gap)" in log_a, log_a
        log_b = terminate(b)  # the top: goes back
        assert "996 unused integers handed back at stop, 0 dropped (gap)" in log_b, log_b
        c = start(tmp_path, env)
        assert next_ids(c, 2) == [1005, 1006]
    finally:
        for node in (a, b, c):
            if node is not None:
                node.stop()


def test_stops_and_restarts_under_load_never_issue_an_integer_twice(tmp_path: Path, env: dict[str, str]) -> None:
    nodes = [start(tmp_path, env), start(tmp_path, env)]
    try:
        create(nodes[0].url, cache=20)  # small ranges: many reservations, hand-backs at every stop
        served = Served()
        for round_ in range(3):
            victim, other = nodes[round_ % 2], nodes[1 - round_ % 2]

            def stop_one_cleanly(victim: Server = victim, other: Server = other) -> None:
                wait_served(served, victim.url, 300)  # load on it first
                terminate(victim)  # SIGTERM while clients call it and the other node
                wait_served(served, other.url, 300)  # the other goes on after the hand-back

            run_clients(
                [n.url for n in nodes], CLIENTS_PER_REPLICA, 0, served, during=stop_one_cleanly, tolerate=(0, 503)
            )
            nodes[round_ % 2] = start(tmp_path, env)
        run_clients(
            [n.url for n in nodes],
            CLIENTS_PER_REPLICA,
            0,
            served,
            during=lambda: wait_served(served, nodes[0].url, 300),
        )
        check(served, nodes[0].url)
        for name in SEQUENCES:
            assert served.integers(name) > 500, served.integers(name)
    finally:
        for node in nodes:
            node.stop()


def test_sigkill_still_loses_the_range(tmp_path: Path, env: dict[str, str]) -> None:
    a = start(tmp_path, env)
    try:
        create(a.url, cache=CACHE)
        issued = next_ids(a, 7)
    finally:
        a.kill()  # nothing runs: no hand-back
    b = start(tmp_path, env)
    try:
        first = next_ids(b, 1)[0]
    finally:
        b.stop()
    gap = first - issued[-1] - 1
    print(f"integers lost by a SIGKILL after 7 issued: {gap} (cache {CACHE})")
    assert gap == CACHE - len(issued)  # the whole unused range, never less: no integer twice


@pytest.mark.parametrize("outage", ["stopped", "stalled"])
def test_with_the_store_down_the_stop_is_bounded_and_the_range_a_gap(tmp_path: Path, store: Store, outage: str) -> None:
    env = store.env()
    a = start(tmp_path, env)
    try:
        create(a.url, cache=CACHE)
        issued = next_ids(a, 9)
        if outage == "stopped":
            store.stop()  # refuses connections: the hand-back fails at once
        else:
            store.pause()  # SIGSTOP: connections hang: the hand-back runs into its timeout
    finally:
        try:
            log = terminate(a)
        finally:
            if outage == "stopped":
                store.start()
            else:
                store.resume()
    lines = log.splitlines()
    began = next(i for i, line in enumerate(lines) if "Waiting for application shutdown." in line)
    done = next(i for i, line in enumerate(lines) if "unused integers handed back at stop" in line)
    assert "0 unused integers handed back at stop, 991 dropped (gap)" in lines[done], log
    assert any("was not handed back" in line for line in lines[began:done]), log
    took = stamp(lines[done]) - stamp(lines[began])
    print(f"hand-back with {store.name} {outage} gave up after {took:.2f} s (bound {HAND_BACK_TIMEOUT_S:g} s)")
    assert took < HAND_BACK_TIMEOUT_S + 1.0, log
    b = start(tmp_path, env)
    try:
        first = next_ids(b, 1)[0]
    finally:
        b.stop()
    if outage == "stopped":  # the write never reached the store: the range stayed a gap
        assert first == issued[-1] + 992
    else:  # sent to the stalled store, it may apply once it resumes (counted as a gap all the same: too high)
        assert first in (issued[-1] + 1, issued[-1] + 992)  # either way never a repeat


def stamp(line: str) -> float:
    """Seconds of a log line's leading timestamp (``2026-11-25T17:01:46.343Z ...``)."""
    return datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
