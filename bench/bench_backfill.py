"""Benchmark backfill (``POST /v1/ids/{scheme}/backfill``) beside live issue of the same count, on a real etcd and a
real PostgreSQL, and print the figures.

Per backend: three ``idmint serve`` replicas (one uvicorn worker each, ``IDMINT_BACKFILL_IDENTITIES=8``) on the
store; one client thread per replica sends requests of ``--batch`` IDs back to back, the three at once, until each
replica has answered ``--ids`` IDs. Backfill requests carry ``--batch`` random past times (ms over ten years: every
time its own tick, the worst case for the marks: one stored mark per ID); live issue asks ``GET
/v1/ids/{scheme}?count=--batch``. Printed: IDs/s per replica (each replica's IDs over its own wall time) and for the
fleet (all IDs over the wall time of the three together), for snowflake (marks in storage) and ULID (random bits:
no storage round trip), with ``/proc/loadavg`` before and after.

Usage: python bench/bench_backfill.py [--ids 50000] [--batch 10000] [--only etcd|postgres]
Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import random
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.etcd import EtcdServer
from tests.support.postgres import start_postgres
from tests.support.server import Server

PAST_FROM_MS = 1_420_070_400_000  # 2015-01-01
PAST_SPAN_MS = 10 * 365 * 86_400_000


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_replica(node: Server, scheme: str, total: int, batch: int, backfill: bool) -> tuple[int, float]:
    """(IDs, seconds) of one client sending requests back to back to ``node``."""
    rng = random.Random()
    done = 0
    with httpx.Client(base_url=node.url, timeout=300) as client:
        started = time.perf_counter()
        while done < total:
            n = min(batch, total - done)
            if backfill:
                times = [rfc3339(PAST_FROM_MS + rng.randrange(PAST_SPAN_MS)) for _ in range(n)]
                r = client.post(f"/v1/ids/{scheme}/backfill", json={"times": times})
            else:
                r = client.get(f"/v1/ids/{scheme}", params={"count": n})
            if r.status_code == 503:
                time.sleep(float(r.headers.get("retry-after", "1")))
                continue
            r.raise_for_status()
            done += len(r.json()["ids"])
        return done, time.perf_counter() - started


def measure(nodes: list[Server], scheme: str, total: int, batch: int, backfill: bool) -> tuple[list[float], float]:
    """(IDs/s of each replica, IDs/s of the fleet)."""
    with concurrent.futures.ThreadPoolExecutor(len(nodes)) as pool:
        started = time.perf_counter()
        results = list(pool.map(lambda node: run_replica(node, scheme, total, batch, backfill), nodes))
        wall = time.perf_counter() - started
    return [ids / seconds for ids, seconds in results], sum(ids for ids, _ in results) / wall


def bench_backend(name: str, env: dict[str, str], workdir: Path, args: argparse.Namespace) -> None:
    env = {**env, "IDMINT_BACKFILL_IDENTITIES": "8", "IDMINT_SIQ_DOMAIN": "example.com"}
    nodes = [Server(workdir / name, env) for _ in range(3)]
    try:
        for node in nodes:
            node.wait_ready()
        for scheme in ("snowflake", "ulid"):
            # warm up both paths (the backfill identity's lease, the connection pools)
            measure(nodes, scheme, 1000, 1000, True)
            measure(nodes, scheme, 1000, 1000, False)
            for label, backfill in (("backfill", True), ("live", False)):
                per, fleet = measure(nodes, scheme, args.ids, args.batch, backfill)
                shown = ", ".join(f"{rate:,.0f}" for rate in per)
                print(
                    f"{name:9} {scheme:10} {label:9} per replica [{shown}] IDs/s   fleet {fleet:,.0f} IDs/s", flush=True
                )
    finally:
        for node in nodes:
            node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=50_000, help="IDs per replica per measurement")
    parser.add_argument("--batch", type=int, default=10_000, help="IDs (times) per request")
    parser.add_argument("--only", choices=("etcd", "postgres"))
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="idmint-bench-backfill-"))
    print(f"loadavg before: {loadavg()}", flush=True)
    try:
        if args.only in (None, "etcd"):
            etcd = EtcdServer(workdir / "etcd")
            etcd.start()
            try:
                namespace = f"bench-{uuid.uuid4().hex[:8]}/"
                bench_backend(
                    "etcd", {"IDMINT_ETCD_ENDPOINTS": etcd.endpoint, "IDMINT_ETCD_NAMESPACE": namespace}, workdir, args
                )
            finally:
                etcd.stop()
        if args.only in (None, "postgres"):
            postgres = start_postgres()
            try:
                env = {"IDMINT_POSTGRES_URL": postgres.url("postgres"), "IDMINT_POSTGRES_SCHEMA": "bench_backfill"}
                bench_backend("postgres", env, workdir, args)
            finally:
                postgres.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"loadavg after:  {loadavg()}", flush=True)


if __name__ == "__main__":
    main()
