"""Admin routes on real replicas and a real etcd or PostgreSQL: drain under load, revoke under load.

Real ``idmint serve`` processes (tests/helpers.py ``Server``) on the session's etcd or PostgreSQL, short lease TTL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server
from tests.support.storage import TTL_S, Store
from tests.test_ledger_replicas import until
from tests.test_replicas import identities, replicas

pytestmark = pytest.mark.integration  # real replicas and etcd or PostgreSQL (the store fixture: once per backend)


class Load:
    """Threads asking ``replica`` for IDs of ``scheme`` over and over until stopped: every answer is kept as
    (sent at, answered at, status, ids) on the monotonic clock."""

    def __init__(self, replica: Server, scheme: str, count: int = 20, threads: int = 2) -> None:
        self.replica, self.scheme, self.count = replica, scheme, count
        self.answers: list[tuple[float, float, int, list[str]]] = []
        self.refusals: list[tuple[float, int, str]] = []  # (sent at, status, body) of every answer but a 200
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        with httpx.Client(base_url=self.replica.url, timeout=30) as client:
            while not self._stop.is_set():
                sent = time.monotonic()
                r = client.get(f"/v1/ids/{self.scheme}", params={"count": self.count})
                ids = r.json()["ids"] if r.status_code == 200 else []
                if r.status_code != 200:
                    self.refusals.append((sent, r.status_code, r.text[:300]))
                self.answers.append((sent, time.monotonic(), r.status_code, ids))

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def ids(self) -> list[str]:
        return [i for *_, ids in self.answers for i in ids]

    def wait_answers(self, n: int) -> None:
        until(lambda: len(self.answers) >= n, 20, f"{n} answers from {self.replica.url}")


def stream(replica: Server, scheme: str, count: int, out: list[Any], begun: threading.Event) -> Callable[[], None]:
    """A stream of ``count`` IDs; ``begun`` is set once its response began (it is in flight)."""

    def run() -> None:
        with httpx.stream("GET", f"{replica.url}/v1/ids/{scheme}/stream", params={"count": count}, timeout=60) as r:
            begun.set()
            body = r.read()
        out.append((r.status_code, body.split(b"\n")[:-1], time.monotonic()))

    return run


def test_drain_under_load_finishes_in_flight_releases_at_once_and_leaves_others_alone(
    tmp_path: Path, store: Store
) -> None:
    # A long lease: the test is about the drain, so a renewal slowed by a busy machine must not fail a node closed.
    env = store.env(IDMINT_LEASE_TTL="10")
    with replicas(tmp_path, 3, env) as (drained, other, third):
        mine = identities(drained)
        streams: list[Any] = []
        begun = [threading.Event(), threading.Event()]
        runners = [threading.Thread(target=stream(drained, "eight-byte", 60_000, streams, b)) for b in begun]
        with Load(other, "eight-byte") as load_other, Load(third, "snowflake") as load_third:
            load_other.wait_answers(5)
            for t in runners:
                t.start()
            until(lambda: all(b.is_set() for b in begun), 10, "both streams in flight")
            asked = time.monotonic()
            r = httpx.post(f"{drained.url}/v1/admin/drain", timeout=60)
            answered = time.monotonic()
            assert r.status_code == 200, r.text
            body = r.json()
            for t in runners:
                t.join()
            held_keys = store.held()
            refused = drained.get("/v1/ids/eight-byte")
            ready = drained.get("/readyz")
            load_third.wait_answers(len(load_third.answers) + 5)
        # In-flight streams finished whole; the drain answered within a second of the last one.
        assert [s[0] for s in streams] == [200, 200] and all(len(s[1]) == 60_000 for s in streams)
        last_done = max(s[2] for s in streams)
        assert answered - max(last_done, asked) < 1.0, (answered - asked, body)
        assert {c["scheme"] for c in body["released"]} >= {"eight-byte", "snowflake", "siq", "muid", "hlc-ulid"}
        # Its claims are gone from the store the moment drain answers; it refuses new requests and says it drains.
        for c in body["released"]:
            if c["scheme"] == "eight-byte":
                assert not [k for k in held_keys if k.endswith(f"pool/0:{c['identity']}")], held_keys
            elif c["scheme"] in ("hlc-ulid", "snowflake"):
                assert not [k for k in held_keys if k.endswith(f"/{c['scheme']}/{c['identity']}")], held_keys
        assert mine["eight-byte"] == [c["identity"] for c in body["released"] if c["scheme"] == "eight-byte"]
        assert refused.status_code == 503 and refused.headers["retry-after"]
        assert ready.status_code == 503 and ready.json()["status"] == "draining"
        assert drained.get("/healthz").status_code == 200
        # The other replicas never noticed: no 5xx; and no ID was issued twice.
        refused_others = load_other.refusals + load_third.refusals
        assert not refused_others, (asked, refused_others[:3], other.log()[-3000:], third.log()[-3000:])
        every = load_other.ids() + load_third.ids() + [i.decode() for s in streams for i in s[1]]
        assert len(every) == len(set(every))


def test_revoke_under_load_stops_the_owner_first_then_another_node_claims(tmp_path: Path, store: Store) -> None:
    env = store.env(IDMINT_EIGHT_BYTE_POOL="0-1")
    with replicas(tmp_path, 2, env) as (owner, peer):
        waiting = Server(tmp_path, env)  # the pool is full: it waits for an eight-byte generator ID
        try:
            waiting.wait("/healthz")
            assert waiting.get("/v1/ids/eight-byte").status_code == 503
            target = identities(owner)["eight-byte"][0]
            with Load(owner, "eight-byte") as load_owner, Load(peer, "eight-byte") as load_peer:
                load_owner.wait_answers(5)
                asked = time.monotonic()
                r = httpx.post(f"{peer.url}/v1/admin/claims/eight-byte/{target}/revoke", timeout=30)
                answered = time.monotonic()
                assert r.status_code == 200, r.text
                body = r.json()
                assert body["owner"]["pid"] == owner.pid and body["owner_stopped"] and body["freed"]
                # The owner acknowledged (stopped) before the key was freed, well within the guard lease's TTL...
                assert answered - asked < TTL_S, body
                until(lambda: [a for a in load_owner.answers if a[0] > answered], 5, "the owner answers again")
                after = [a for a in load_owner.answers if a[0] > answered]
                assert {a[2] for a in after} == {503}, after[:3]
                # ...and answered 503 on its watch's news, not on the guard lease's expiry one TTL later.
                first_refusal = min(a[1] for a in load_owner.answers if a[0] >= asked and a[2] == 503)
                assert first_refusal - asked < TTL_S, (first_refusal - asked, answered - asked, body)
                got = until(
                    lambda: (ids := identities(waiting)).get("eight-byte") == [target] and ids,
                    TTL_S * 2 + 15,
                    "the waiting node claims the revoked identity",
                )
                assert got["eight-byte"] == [target]
                # The new owner issues once its clock passes the high-water mark it inherited (the old owner's
                # marks ran ahead of the clock): until then it answers 503 naming that wait, not 200.
                r = until(
                    lambda: (a := waiting.get("/v1/ids/eight-byte", count=500)).status_code == 200 and a,
                    TTL_S * 2 + 15,
                    "the new owner issues above the inherited high-water mark",
                )
                handed = r.json()["ids"]
                load_peer.wait_answers(len(load_peer.answers) + 3)
            failed = [a[:3] for a in load_peer.answers if a[2] != 200]
            assert not failed, (failed[:5], peer.log()[-3000:])
            every = load_owner.ids() + load_peer.ids() + handed
            assert len(every) == len(set(every)), "duplicates across the handover"
            # Nothing was issued by the owner afterwards: no request sent after the revoke's answer got IDs (judged by
            # when a request was sent: an answer issued before the stop may reach a thread of a busy machine later).
            assert not [a[:3] for a in load_owner.answers if a[0] > answered and a[3]]
        finally:
            waiting.stop()
