"""Many replicas on one real etcd or PostgreSQL: distinct identities, no duplicate IDs, fail-closed through faults.

Every test starts real ``idmint serve`` processes (uvicorn) against the session's etcd (tests/support/etcd.py) or
PostgreSQL (tests/support/postgres.py), on loopback and free ports, with a short lease TTL so faults play out in
seconds; the tests taking the ``store`` fixture (tests/support/storage.py) run once per backend.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import CLAIMING, SCHEMES, TIMESTAMP_FIELD
from tests.support.order import soak_size
from tests.support.server import Server, until_available
from tests.support.storage import BACKENDS, EVERY_BACKEND, MARGIN_S, TTL_S, Store

pytestmark = pytest.mark.integration  # real replicas and etcd or PostgreSQL

CLAIMED = CLAIMING  # muid, eight-byte, hlc-ulid, siq, snowflake


def etcd_env(etcd_server, namespace: str, **extra: str) -> dict[str, str]:
    return {
        "IDMINT_ETCD_ENDPOINTS": etcd_server.endpoint,
        "IDMINT_ETCD_NAMESPACE": namespace,
        "IDMINT_ETCD_LEASE_TTL": str(TTL_S),
        "IDMINT_ETCD_SAFETY_MARGIN": str(MARGIN_S),
        "IDMINT_SIQ_DOMAIN": "example.com",
        **extra,
    }


@contextlib.contextmanager
def replicas(tmp_path: Path, count: int, env: dict[str, str], ready: bool = True) -> Iterator[list[Server]]:
    started = [Server(tmp_path, env) for _ in range(count)]
    try:
        for r in started:
            r.wait("/readyz" if ready else "/healthz")
        yield started
    finally:
        for r in started:
            r.stop()


def identities(replica: Server) -> dict[str, list[int]]:
    cat = replica.get("/v1/schemes").json()["schemes"]
    return {s["name"]: s["node"].get("identities", [s["node"].get("random_part")]) for s in cat}


def ids_of(replica: Server, scheme: str, count: int, stream: bool) -> list[bytes]:
    if stream:
        r = until_available(
            lambda: httpx.get(f"{replica.url}/v1/ids/{scheme}/stream", params={"count": count}, timeout=120)
        )
        assert r.status_code == 200, r.text
        lines = r.content.split(b"\n")
        assert lines[-1] == b""
        return lines[:-1]
    r = replica.get_available(f"/v1/ids/{scheme}", count=count)
    assert r.status_code == 200, r.text
    return [i.encode() for i in r.json()["ids"]]


def wait_closed(replica: Server, schemes: tuple[str, ...], timeout: float) -> float:
    """Wait until ``/readyz`` shows every scheme of ``schemes`` not ready (failed closed). Returns the monotonic time
    at which the last poll that still saw one of them ready was sent: the node was ready at some moment after it, so
    it is a time the node's refusal provably came after, and a slow answer on a busy machine never inflates it.
    (One scheme may stop sooner, on a failed mark write: the lease's deadline stops them all.) A node never seen
    ready gives -inf: the time this wait began is no time it was seen issuing (the waits run one node after
    another, so a later node's wait begins after the earlier ones' refusals)."""
    deadline = time.monotonic() + timeout
    last_ready = -math.inf
    while True:
        sent = time.monotonic()
        detail = replica.get("/readyz").json()["schemes"]
        if not any(detail[s]["ready"] for s in schemes):
            return last_ready
        last_ready = sent
        assert time.monotonic() < deadline, f"still issuing after {timeout} s: {detail}"
        time.sleep(0.02)


def native_timestamp(replica: Server, scheme: str, text: bytes) -> int:
    """The ID's timestamp in its scheme's own unit (SIQ: seconds * 65536 + fraction)."""
    fields = replica.get(f"/v1/decode/{scheme}/{text.decode()}").json()["fields"]
    if scheme == "siq":
        return fields["seconds"] * 65536 + fields["fraction"]
    return fields[TIMESTAMP_FIELD[scheme]]


def test_three_replicas_hold_distinct_identities_visible_in_etcd(
    tmp_path: Path, etcd_server, etcd_namespace: str
) -> None:
    with replicas(tmp_path, 3, etcd_env(etcd_server, etcd_namespace)) as nodes:
        held = [identities(r) for r in nodes]
        for scheme in CLAIMED + ("wiji",):
            sets = [set(h[scheme]) for h in held]
            assert all(sets) and len(set().union(*sets)) == sum(map(len, sets)), (scheme, sets)
        dump = etcd_server.etcdctl("get", "--prefix", etcd_namespace, "-w", "json")
        kvs = json.loads(dump).get("kvs", [])
        import base64

        claims = {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]) for kv in kvs}
        pids = {r.pid for r in nodes}
        eight = [k for k in claims if k.startswith(f"{etcd_namespace}pool/0:")]
        assert len(eight) == 3, sorted(claims)
        for key in eight:
            holder = json.loads(claims[key])["holder"]
            assert holder["pid"] in pids and holder["host"]
        # Keys under idmint/<scheme>/: every claiming scheme but eight-byte (its pool/ keys, above), and wiji's
        # registered random part.
        for scheme in sorted({*CLAIMING, "wiji"} - {"eight-byte"}):
            assert sum(1 for k in claims if k.startswith(f"{etcd_namespace}idmint/{scheme}/")) == 3, scheme
        # Snowflake worker IDs: one key per replica under idmint/snowflake/<layout>/, no worker ID twice.
        workers = [k.rsplit("/", 1)[1] for k in claims if k.startswith(f"{etcd_namespace}idmint/snowflake/twitter/")]
        assert len(workers) == len(set(workers)) == 3, workers
        assert sorted(int(w) for w in workers) == sorted(h["snowflake"][0] for h in held)


PER_SCHEME = soak_size(1_000_000, 100_000)
"""IDs per scheme the three replicas issue between them in the duplicate hunt (a soak: a million in
``scripts/soak.sh``)."""


@pytest.mark.soak
def test_no_duplicate_across_replicas_over_many_ids_per_scheme(
    tmp_path: Path, etcd_server, etcd_namespace: str
) -> None:
    env = etcd_env(etcd_server, etcd_namespace, IDMINT_EIGHT_BYTE_GENERATORS="8")
    per_scheme = PER_SCHEME
    batch = per_scheme // 100
    streamed = -(-(per_scheme - 30 * batch) // 3)  # the rest, a third per replica, rounded up
    with replicas(tmp_path, 3, env) as nodes:
        for scheme in SCHEMES:
            # Concurrent clients: each replica serves one stream and several batches at the same time.
            jobs = []
            with concurrent.futures.ThreadPoolExecutor(max_workers=9) as pool:
                for _i, node in enumerate(nodes):
                    jobs.append(pool.submit(ids_of, node, scheme, streamed, True))
                    for _ in range(10):
                        jobs.append(pool.submit(ids_of, node, scheme, batch, False))
                seen: set[bytes] = set()
                total = 0
                for job in jobs:
                    got = job.result()
                    total += len(got)
                    seen.update(got)
            assert total >= per_scheme
            assert len(seen) == total, f"{scheme}: {total - len(seen)} duplicates"


def test_a_storage_outage_stops_issuing_within_ttl_and_recovers_without_duplicates(
    tmp_path: Path, store: Store
) -> None:
    with replicas(tmp_path, 3, store.env()) as nodes:
        before: dict[str, set[str]] = {s: set() for s in SCHEMES}
        for node in nodes:
            for scheme in SCHEMES:
                before[scheme].update(ids_of(node, scheme, 2000, False))
        store.stop()
        stopped = time.monotonic()
        try:
            closed = max(wait_closed(node, CLAIMED, TTL_S + 2) for node in nodes)
            assert closed - stopped <= TTL_S, "a replica kept issuing past its lease TTL"
            for node in nodes:
                for scheme in CLAIMED:
                    r = node.get(f"/v1/ids/{scheme}")
                    assert r.status_code == 503, (scheme, r.text)
                    assert int(r.headers["retry-after"]) >= 1
        finally:
            store.start()
        for node in nodes:
            node.wait("/readyz", 200, timeout=40)
        for node in nodes:
            for scheme in SCHEMES:
                after = ids_of(node, scheme, 2000, False)
                assert before[scheme].isdisjoint(after), scheme
                before[scheme].update(after)


def test_killed_replica_identity_is_free_only_after_its_lease_and_next_holder_stays_above_its_mark(
    tmp_path: Path, store: Store
) -> None:
    env = store.env()
    first = Server(tmp_path, env)
    try:
        first.wait("/readyz")
        held = identities(first)
        last = {}
        for scheme in CLAIMED:
            texts = ids_of(first, scheme, 5000, False)
            last[scheme] = max(native_timestamp(first, scheme, t) for t in texts[-3:])
    finally:
        first.kill()  # no clean release: its lease must expire
    killed = time.monotonic()

    # The next holder asks for exactly the same identities, with its clock set 1.5 s behind the first's.
    static = {
        "IDMINT_EIGHT_BYTE_GENERATOR_ID": str(held["eight-byte"][0]),
        "IDMINT_MUID_MEDALLION": str(held["muid"][0]),
        "IDMINT_HLC_ULID_PUBLISHER_ID": str(held["hlc-ulid"][0]),
        "IDMINT_SIQ_SHARD": str(held["siq"][0]),
        "IDMINT_SNOWFLAKE_WORKER_ID": str(held["snowflake"][0]),
        "IDMINT_CLOCK_OFFSET_MS": "-1500",
    }
    nxt = Server(tmp_path, {**env, **static})
    try:
        nxt.wait("/healthz")
        early = nxt.get("/readyz")
        if time.monotonic() - killed < TTL_S - MARGIN_S - 0.5:
            assert early.status_code == 503, "claimed an identity whose lease had not expired"
        nxt.wait("/readyz", 200, timeout=TTL_S * 4 + 10)
        assert time.monotonic() - killed >= TTL_S - 1, "identity was claimable before the lease could expire"
        for scheme in CLAIMED:
            texts = ids_of(nxt, scheme, 5000, False)
            first_new = min(native_timestamp(nxt, scheme, t) for t in texts[:3])
            assert first_new > last[scheme], f"{scheme}: {first_new} is not above the mark {last[scheme]}"
    finally:
        nxt.stop()


def test_pool_of_two_generator_ids_with_three_replicas(tmp_path: Path, store: Store) -> None:
    env = store.env(IDMINT_EIGHT_BYTE_POOL="0-1")
    a, b = Server(tmp_path, env), Server(tmp_path, env)
    c: Server | None = None
    try:
        a.wait("/readyz")
        b.wait("/readyz")
        c = Server(tmp_path, env)
        c.wait("/healthz")
        # Until its first claim attempt, the node says it is starting; then it names the full pool.
        deadline = time.monotonic() + 30
        while True:
            r = c.get("/readyz")
            reason = r.json()["schemes"]["eight-byte"].get("reason", "")
            if "starting" not in reason and "not checked yet" not in reason:
                break
            assert time.monotonic() < deadline, reason
            time.sleep(0.05)
        assert r.status_code == 503
        assert "eight-byte" in reason and ("held" in reason or "exhausted" in reason), reason
        assert c.get("/v1/ids/eight-byte").status_code == 503
        deadline = time.monotonic() + 20
        while c.get("/v1/ids/hlc-ulid").status_code != 200:  # the other schemes still issue (once claimed)
            assert time.monotonic() < deadline, c.log_tail()
            time.sleep(0.05)
        a.stop()
        c.wait("/readyz", 200, timeout=30)
        assert identities(c)["eight-byte"][0] in (0, 1)
        assert c.get_available("/v1/ids/eight-byte").status_code == 200
    finally:
        for replica in (a, b, c):
            if replica is not None:
                replica.stop()


def test_a_stream_that_loses_its_lease_ends_truncated_not_short(tmp_path: Path, store: Store) -> None:
    # One generator ID: 640,000 eight-byte IDs take ten seconds at the format's cap, so the store stops mid-stream.
    with replicas(tmp_path, 1, store.env()) as (node,):
        received = bytearray()
        with httpx.stream("GET", f"{node.url}/v1/ids/eight-byte/stream", params={"count": 640_000}, timeout=60) as r:
            assert r.status_code == 200
            stopped = False
            with pytest.raises(httpx.RemoteProtocolError):
                for chunk in r.iter_bytes():
                    received += chunk
                    if not stopped and len(received) > 100_000:
                        store.stop()
                        stopped = True
        store.start()
        lines = bytes(received).split(b"\n")
        assert 0 < len(lines) - 1 < 640_000
        assert "stream stopped after" in node.log()


@pytest.mark.parametrize("store", EVERY_BACKEND, indirect=True)
def test_a_sigkill_and_a_clock_stepped_back_leave_no_duplicate_across_three_replicas(
    tmp_path: Path, store: Store
) -> None:
    env = store.env()
    issued: dict[str, list[bytes]] = {s: [] for s in CLAIMED}

    def take(nodes: list[Server], rounds: int) -> None:
        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            jobs = [(s, pool.submit(ids_of, n, s, 5000, False)) for _ in range(rounds) for n in nodes for s in CLAIMED]
            for scheme, job in jobs:
                issued[scheme].extend(job.result())

    with replicas(tmp_path, 3, env) as nodes:
        take(nodes, 2)
        victim = nodes[0]
        held = identities(victim)
        victim.kill()  # no release, no final mark: its lease must run out
        # Its successor takes exactly its identities, its clock stepped 1.5 s back (IDMINT_CLOCK_OFFSET_MS).
        static = {
            "IDMINT_EIGHT_BYTE_GENERATOR_ID": str(held["eight-byte"][0]),
            "IDMINT_MUID_MEDALLION": str(held["muid"][0]),
            "IDMINT_HLC_ULID_PUBLISHER_ID": str(held["hlc-ulid"][0]),
            "IDMINT_SIQ_SHARD": str(held["siq"][0]),
            "IDMINT_SNOWFLAKE_WORKER_ID": str(held["snowflake"][0]),
            "IDMINT_CLOCK_OFFSET_MS": "-1500",
        }
        heir = Server(tmp_path, {**env, **static})
        try:
            take(nodes[1:], 2)  # the others go on meanwhile
            heir.wait("/readyz", 200, timeout=TTL_S * 4 + 20)
            now_held = identities(heir)
            assert all(now_held[s] == held[s] for s in CLAIMED), (now_held, held)
            take([heir, *nodes[1:]], 2)
        finally:
            heir.stop()
    total = sum(len(v) for v in issued.values())
    duplicates = {s: len(v) - len(set(v)) for s, v in issued.items()}
    print(
        f"{store.name}: {total} IDs of {len(CLAIMED)} schemes compared across a SIGKILL and a clock step: {duplicates}"
    )
    assert total >= 5000 * len(CLAIMED) * 14 and not any(duplicates.values()), duplicates


@pytest.mark.parametrize(
    ("store", "outage"),
    # MySQL's stop is a restart like the others': only its stall (SIGSTOP) is its own, and it runs that alone.
    [(name, outage) for name in BACKENDS for outage in ("stopped", "stalled")] + [("mysql", "stalled")],
    indirect=["store"],
)
def test_storage_down_11_s_fails_leased_schemes_closed_in_time_while_sequences_answer_then_recovers(
    tmp_path: Path, store: Store, outage: str
) -> None:
    with replicas(tmp_path, 2, store.env()) as nodes:
        r = httpx.post(f"{nodes[0].url}/v1/sequences", json={"name": "orders", "cache": 1000}, timeout=30)
        assert r.status_code in (200, 201), r.text
        before: dict[str, set[bytes]] = {s: set() for s in CLAIMED}
        for node in nodes:
            assert node.get("/v1/sequences/orders/next").status_code == 200  # each holds a range now
            for scheme in CLAIMED:
                before[scheme].update(ids_of(node, scheme, 1000, False))
        (store.stop if outage == "stopped" else store.pause)()
        down = time.monotonic()
        try:
            closed = max(wait_closed(node, CLAIMED, TTL_S + 5) for node in nodes) - down
            print(f"{store.name} {outage}: leased schemes last seen issuing {closed:.2f} s in (TTL {TTL_S} s)")
            assert closed <= TTL_S - MARGIN_S, closed
            served = 0
            while time.monotonic() - down < 11:
                for node in nodes:
                    for scheme in CLAIMED:
                        refused = node.get(f"/v1/ids/{scheme}")
                        assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
                    answer = node.get("/v1/sequences/orders/next")
                    assert answer.status_code == 200, answer.text  # from the range it holds, in memory
                    served += 1
                time.sleep(0.2)
            assert served >= len(nodes)  # every node answered next from memory, the whole outage long
        finally:
            (store.start if outage == "stopped" else store.resume)()
        back = time.monotonic()
        for node in nodes:
            node.wait("/readyz", 200, timeout=60)
        print(f"{store.name} {outage}: ready again {time.monotonic() - back:.2f} s after the store came back")
        for node in nodes:
            for scheme in CLAIMED:
                after = ids_of(node, scheme, 1000, False)
                assert before[scheme].isdisjoint(after), scheme
                before[scheme].update(after)
