"""How long a replica on PostgreSQL takes to issue again after the database comes back from an outage.

One ``idmint serve`` on a real PostgreSQL (Debian's, started here on a free loopback port; the default lease TTL of
10 s), PostgreSQL stopped for each of ``--outages`` seconds and started again; printed per outage: the seconds from
PostgreSQL answering again until ``GET /v1/ids/eight-byte`` answers 200, and the load average.

Usage: python bench/bench_recovery.py [--outages 5 20 40 60]
Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.postgres import start_postgres
from tests.support.server import Server

POLL_S = 0.05


def issues(server: Server) -> bool:
    try:
        return httpx.get(f"{server.url}/v1/ids/eight-byte", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outages", type=float, nargs="+", default=[5.0, 20.0, 40.0, 60.0])
    args = parser.parse_args()
    postgres = start_postgres()
    workdir = Path(tempfile.mkdtemp(prefix="idmint-bench-recovery-"))
    server = Server(workdir, {"IDMINT_POSTGRES_URL": postgres.url(), "IDMINT_SIQ_DOMAIN": "example.com"})
    try:
        server.wait_ready()
        for outage in args.outages:
            postgres.stop()
            time.sleep(outage)
            postgres.start()  # returns once PostgreSQL answers
            back = time.monotonic()
            while not issues(server):
                time.sleep(POLL_S)
            print(
                f"outage {outage:4.0f} s: eight-byte issued again {time.monotonic() - back:5.1f} s after PostgreSQL"
                f" answered (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    finally:
        server.stop()
        postgres.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(postgres.directory, ignore_errors=True)


if __name__ == "__main__":
    main()
