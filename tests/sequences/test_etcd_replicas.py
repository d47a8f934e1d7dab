"""Three real ``idmint serve`` replicas on a real etcd or PostgreSQL (the ``store`` fixture: once per backend):
concurrent next and range calls for two sequences never share an integer, through a SIGKILL and restart, and through
a storage outage that the replicas ride out on the ranges they hold (then 503 + Retry-After), resuming with no
overlap once the store is back."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.sequences.support import SEQUENCES, Served, check, create, each_served, run_clients, wait_served
from tests.support.server import Server
from tests.support.storage import EVERY_BACKEND, Store
from tests.test_replicas import replicas

pytestmark = pytest.mark.integration  # a real etcd or PostgreSQL, and processes

CLIENTS_PER_REPLICA = 8
LOAD = 500
"""Integers each replica answers to next calls in a phase of load (about 20 next calls, with ranges between them):
a phase ends on work done, not after a fixed time."""


@pytest.mark.parametrize("store", EVERY_BACKEND, indirect=True)
def test_three_replicas_next_and_range_never_repeat_through_a_sigkill(tmp_path: Path, store: Store) -> None:
    env = store.env()
    with replicas(tmp_path, 3, env) as nodes:
        create(nodes[0].url, cache=20)
        served = Served()
        urls = [n.url for n in nodes]
        run_clients(urls, CLIENTS_PER_REPLICA, 0, served, during=each_served(served, urls, LOAD))
        check(served, nodes[1].url)
        before = {name: served.integers(name) for name in SEQUENCES}
        assert all(n > 1000 for n in before.values()), before

        victim = nodes[2]

        def crash() -> None:
            wait_served(served, victim.url, LOAD)  # under load
            victim.kill()
            wait_served(served, nodes[0].url, LOAD // 4)  # the others go on

        run_clients([n.url for n in nodes], CLIENTS_PER_REPLICA, 0, served, during=crash, tolerate=(0,))
        restarted = Server(tmp_path, env)
        try:
            restarted.wait("/readyz")
            after = [nodes[0].url, nodes[1].url, restarted.url]
            run_clients(after, CLIENTS_PER_REPLICA, 0, served, during=each_served(served, after, LOAD))
            check(served, restarted.url)
        finally:
            restarted.stop()
        assert all(served.integers(name) > before[name] for name in SEQUENCES)


def probe(url: str, name: str, served: Served) -> int:
    r = httpx.get(f"{url}/v1/sequences/{name}/next", timeout=30)
    if r.status_code == 200:
        served.add_next(url, -1, name, r.json()["ids"])
    else:
        assert r.status_code == 503, r.text
        assert int(r.headers["retry-after"]) >= 1
        assert "ran out" in r.json()["detail"] or "unreachable" in r.json()["detail"], r.text
    return r.status_code


def test_a_storage_outage_is_ridden_out_on_held_ranges_then_503_then_resumes(tmp_path: Path, store: Store) -> None:
    env = store.env()
    with replicas(tmp_path, 3, env) as nodes:
        urls = [n.url for n in nodes]
        create(urls[0], cache=5)  # at most 500 per reservation: the held ranges run dry in seconds
        served = Served()
        run_clients(urls, CLIENTS_PER_REPLICA, 0, served, during=each_served(served, urls, LOAD))
        outage: dict[str, float] = {}

        def stop_the_store_until_every_buffer_is_empty() -> None:
            each_served(served, urls, LOAD // 4)()  # under load
            store.stop()
            outage["start"] = time.monotonic()
            try:
                deadline = time.monotonic() + 60
                # Each replica's buffer of each sequence runs dry (the clients' load, plus these probes taking
                # the last few integers one by one); with the store down, a dry buffer stays dry: 503 from then on.
                for u in urls:
                    for name in SEQUENCES:
                        while probe(u, name, served) != 503:
                            assert time.monotonic() < deadline, f"{u} kept serving {name} for 60 s without storage"
                outage["dry"] = time.monotonic()
            finally:
                store.start()
            outage["end"] = time.monotonic()

        run_clients(
            urls, CLIENTS_PER_REPLICA, 0, served, during=stop_the_store_until_every_buffer_is_empty, tolerate=(503,)
        )
        during = served.served_between(outage["start"], outage["dry"])
        print(
            f"integers served by next during the {store.name} outage: {during} "
            f"(held ranges ran dry after {outage['dry'] - outage['start']:.2f} s)"
        )
        assert during > 0, "nothing was served from the held ranges while the store was down"
        assert served.refused > 0

        deadline = time.monotonic() + 30
        while not all(probe(u, name, served) == 200 for u in urls for name in SEQUENCES):
            assert time.monotonic() < deadline, f"replicas did not resume after {store.name} came back"
            time.sleep(0.2)
        run_clients(urls, CLIENTS_PER_REPLICA, 0, served, during=each_served(served, urls, LOAD))
        check(served, urls[0])
