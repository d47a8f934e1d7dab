"""setval, PATCH and DELETE racing with ``next`` and ``range`` from other replicas never repeat an integer, on
three real ``idmint serve`` replicas over one state directory, over a real etcd and over a real PostgreSQL.

Clients on two replicas take integers of a templated sequence with a small cache (ranges turn over fast) while an
operator, through the third, moves the allocation point forward (setval), changes the increment, the cache and the
template (to ones that keep texts distinct), deletes the sequence and creates it again (it continues above what it
issued), and stops a replica cleanly (its unused range goes back, racing the operator's writes). Every integer and
every text handed out, by ``next`` or ``range``, is distinct."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.sequences.test_gapless_replicas import backend
from tests.support.etcd import EtcdServer
from tests.support.server import Server
from tests.test_replicas import etcd_env

pytestmark = pytest.mark.integration  # real processes (and a real etcd)

NAME = "orders"
TEMPLATES = ("A{seq}", "A-{seq}", "B{seq:04}")
"""Each keeps its texts apart from the others' (a literal where the others hold a digit or another literal)."""
ROUNDS = 12
"""Operator rounds: each does a setval, a PATCH of increment and cache, a PATCH of the template, and every third a
delete and create (and one stops a replica cleanly and starts it again)."""


@pytest.fixture(params=["embedded", "etcd", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    if request.param == "embedded":
        yield {"IDMINT_STATE_DIR": str(tmp_path / "state")}
    elif request.param == "postgres":
        yield request.getfixturevalue("postgres_schema").env()
    else:
        etcd: EtcdServer = request.getfixturevalue("etcd_server")
        yield etcd_env(etcd, request.getfixturevalue("etcd_namespace"))


def wait_for_more(
    lock: threading.Lock, taken: list[int], more: int, refused: dict[int, int], last: dict[int, str]
) -> None:
    with lock:
        target = len(taken) + more
    deadline = time.monotonic() + 120  # a guard against clients that stopped, not a budget
    while True:
        with lock:
            if len(taken) >= target:
                return
        assert time.monotonic() < deadline, f"the clients took no integers for 120 s (refused: {refused}, last: {last})"
        time.sleep(0.02)


def create(url: str, template: str) -> None:
    r = httpx.post(f"{url}/v1/sequences", json={"name": NAME, "cache": 7, "template": template}, timeout=30)
    assert r.status_code in (200, 201), r.text


def test_setval_patch_and_delete_racing_next_never_repeat_an_integer(tmp_path: Path, env: dict[str, str]) -> None:
    servers = [Server(tmp_path, env) for _ in range(3)]
    lock = threading.Lock()
    integers: list[int] = []
    texts: list[str] = []
    refused: dict[int, int] = {}
    last_refusal: dict[int, str] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def take(number: int) -> None:
        rng = random.Random(number)
        with httpx.Client(timeout=30) as http:
            while not stop.is_set():
                url = servers[1 + number % 2].url
                try:
                    if rng.random() < 0.8:
                        r = http.get(f"{url}/v1/sequences/{NAME}/next", params={"count": rng.randint(1, 20)})
                        if r.status_code == 200:
                            body = r.json()
                            assert len(body["text"]) == len(body["ids"])
                            with lock:
                                integers.extend(body["ids"])
                                texts.extend(body["text"])
                            continue
                    else:
                        r = http.post(f"{url}/v1/sequences/{NAME}/range", params={"count": rng.randint(1, 50)})
                        if r.status_code == 200:
                            body = r.json()
                            with lock:
                                integers.extend(range(body["first"], body["last"] + 1, body["increment"]))
                            continue
                except httpx.TransportError:  # the replica stopping cleanly, or starting again
                    time.sleep(0.05)
                    continue
                assert r.status_code in (404, 503), r.text  # deleted (not yet created again), or stopping
                with lock:
                    refused[r.status_code] = refused.get(r.status_code, 0) + 1
                    last_refusal[r.status_code] = r.text
                time.sleep(0.01)

    def guarded(number: int) -> None:
        try:
            take(number)
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    try:
        for s in servers:
            s.wait("/readyz")
        admin = servers[0].url
        create(admin, TEMPLATES[0])
        threads = [threading.Thread(target=guarded, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        rng = random.Random(7)
        done = {"setval": 0, "patch": 0, "template": 0, "delete": 0, "clean stop": 0}
        template = TEMPLATES[0]
        for round_ in range(ROUNDS):
            if stop.is_set():
                break
            wait_for_more(
                lock, integers, 100, refused, last_refusal
            )  # the clients take integers between the operator's steps
            shown = httpx.get(f"{admin}/v1/sequences/{NAME}", timeout=30).json()
            r = httpx.post(
                f"{admin}/v1/sequences/{NAME}/setval", json={"next": shown["next"] + rng.randint(10_000, 50_000)}
            )
            assert r.status_code in (200, 422), r.text  # 422: a reservation since moved the point past it
            done["setval"] += r.status_code == 200
            patch = {"increment": rng.randint(1, 4), "cache": rng.randint(3, 20)}
            assert httpx.patch(f"{admin}/v1/sequences/{NAME}", json=patch, timeout=30).status_code == 200
            done["patch"] += 1
            template = TEMPLATES[(round_ + 1) % len(TEMPLATES)]
            r = httpx.patch(f"{admin}/v1/sequences/{NAME}", json={"template": template}, timeout=30)
            assert r.status_code == 200, r.text
            done["template"] += 1
            if round_ % 3 == 2:
                assert httpx.delete(f"{admin}/v1/sequences/{NAME}", timeout=30).status_code == 200
                create(admin, template)
                done["delete"] += 1
            if round_ == ROUNDS // 2:
                servers[2].stop()  # SIGTERM: a clean stop hands its unused range back, racing the operator
                servers[2] = Server(tmp_path, env)
                servers[2].wait("/readyz")
                done["clean stop"] += 1
        stop.set()
        for t in threads:
            t.join(120)
        if errors:
            raise errors[0]
        counted = sorted(integers)
        twice = [a for a, b in itertools.pairwise(counted) if a == b]
        assert not twice, f"integers issued twice: {twice[:10]}"
        assert len(set(texts)) == len(texts), "a text issued twice"
        assert done["delete"] == ROUNDS // 3 and done["template"] == ROUNDS and done["clean stop"] == 1
        assert done["setval"] >= ROUNDS // 2, done
        print(
            f"\n{backend(env)}: {len(integers)} integers "
            f"({len(texts)} texts by next) distinct through {done}; refused {refused}"
        )
    finally:
        stop.set()
        for s in servers:
            s.stop()
