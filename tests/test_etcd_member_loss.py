"""Replicas on a real 3-member etcd cluster: killing or stalling any one member under load is invisible.

Three real ``idmint serve`` replicas, each given all three endpoints (each orders them its own way), issue under
steady load from client threads while each member in turn is killed (and restarted) or stalled with SIGSTOP for
5 s. Quorum holds throughout, so the leases stay valid: no request may get a 503, no replica may change an
identity, and no ID may repeat.

The replicas use the default lease TTL (10 s) and safety margin (2 s). Losing the *leader* stops every lease
refresh until a new leader is elected (up to twice etcd's election timeout: 2 s by default), so a TTL whose
refresh interval plus that exceeds TTL - margin (TTL 3 s, margin 1 s) cannot hide a leader loss.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.support.etcd import EtcdCluster
from tests.test_replicas import CLAIMED, identities, replicas

pytestmark = pytest.mark.integration  # a real etcd cluster and replicas

PER_REQUEST = 50
FAULT_S = 5.0
"""How long each member stays down: the fault under test."""
LOAD_BETWEEN = 3 * 2 * len(CLAIMED)
"""Requests answered before the first fault and after each member is back (two rounds of every replica's load)."""


class Load:
    """One client thread per replica issuing PER_REQUEST IDs of each claimed scheme in turn, until stopped."""

    def __init__(self, urls: list[str]) -> None:
        self.statuses: Counter[int] = Counter()
        self.failures: list[str] = []
        self.ids: dict[str, list[str]] = {scheme: [] for scheme in CLAIMED}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(url,), daemon=True) for url in urls]

    def _run(self, url: str) -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            while not self._stop.is_set():
                for scheme in CLAIMED:
                    r = client.get(f"/v1/ids/{scheme}", params={"count": PER_REQUEST})
                    with self._lock:
                        self.statuses[r.status_code] += 1
                        if r.status_code == 200:
                            self.ids[scheme].extend(r.json()["ids"])
                        else:
                            self.failures.append(f"{time.monotonic():.2f} {url} {scheme}: {r.status_code} {r.text}")

    def wait_more(self, answers: int) -> None:
        """Wait until ``answers`` more requests were answered 200 (load measured in work done, not in seconds)."""
        with self._lock:
            target = self.statuses[200] + answers
        deadline = time.monotonic() + 60
        while True:
            with self._lock:
                if self.statuses[200] >= target or self.failures:
                    return
            assert time.monotonic() < deadline, f"fewer than {answers} answers in 60 s: {self.statuses}"
            time.sleep(0.02)

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_losing_any_one_etcd_member_under_load_is_invisible(
    tmp_path: Path, etcd_cluster: EtcdCluster, fault: str
) -> None:
    env = {
        "IDMINT_ETCD_ENDPOINTS": etcd_cluster.endpoints,
        "IDMINT_ETCD_NAMESPACE": f"member-loss-{fault}/",
        "IDMINT_SIQ_DOMAIN": "example.com",
    }
    with replicas(tmp_path, 3, env) as nodes:
        held = [identities(r) for r in nodes]
        in_use = Counter(r.get("/readyz").json()["backend"]["endpoint"] for r in nodes)
        with Load([r.url for r in nodes]) as load:
            load.wait_more(LOAD_BETWEEN)
            for member in etcd_cluster.members:
                if fault == "kill":
                    member.kill()
                    time.sleep(FAULT_S)
                    member.start()
                else:
                    member.pause()
                    time.sleep(FAULT_S)
                    member.resume()
                member.wait_healthy()  # back in the cluster before the next one goes
                load.wait_more(LOAD_BETWEEN)
        assert load.failures == [], load.failures[:10]
        assert load.statuses[200] > 100, load.statuses
        assert [identities(r) for r in nodes] == held
        for scheme, ids in load.ids.items():
            assert len(ids) == len(set(ids)), f"{scheme}: {len(ids) - len(set(ids))} duplicates"
        for r in nodes:
            assert "lost" not in r.log() and "stopped issuing" not in r.log(), r.log()[-3000:]
        assert sum(in_use.values()) == 3
