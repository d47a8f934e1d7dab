"""Single-ID speed of idmint's connection layer (app/serving.py) beside uvicorn's plain httptools protocol.

Two idmint servers of this checkout, one worker each, the same flags except ``--http``: uvicorn's ``httptools``
(every request through ASGI to the front) and ``app.serving:BoundedHttpToolsProtocol`` (what ``idmint serve`` runs:
the hot routes answered by the connection layer itself, header limit and deadline, one idle timer, send timeout).
Each round loads ``GET /v1/ids/wiji`` on both with wrk, alternating (plain, bounded, plain, ...), and the ratio of
medians (bounded / plain) is printed, with the requests per second the server spent on a CPU (/proc schedstat),
which the shared machine disturbs less.

Usage: python bench/bench_protocol.py [--rounds 5] [--seconds 5] [--connections 32]
Needs: wrk (apt-get install wrk). Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import start, stop, wrk_cpu

PLAIN, BOUNDED = "httptools", "app.serving:BoundedHttpToolsProtocol"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    servers = {}
    with tempfile.TemporaryDirectory() as plain_dir, tempfile.TemporaryDirectory() as bounded_dir:
        for http, state in ((PLAIN, plain_dir), (BOUNDED, bounded_dir)):
            proc, base = start(["--factory", "app.main:create_app"], {"IDMINT_STATE_DIR": state}, http=http)
            servers[http] = (proc, base)
        rates: dict[str, list[float]] = {PLAIN: [], BOUNDED: []}
        cpu_rates: dict[str, list[float]] = {PLAIN: [], BOUNDED: []}
        try:
            for n in range(args.rounds):
                for http in (PLAIN, BOUNDED):
                    proc, base = servers[http]
                    rate, per_cpu = wrk_cpu(f"{base}/v1/ids/wiji", args.seconds, args.connections, proc.pid)
                    rates[http].append(rate)
                    cpu_rates[http].append(per_cpu)
                    print(f"round {n + 1} {http:>40}: {rate:9,.0f} req/s, {per_cpu:9,.0f} req per CPU-second")
        finally:
            for proc, _ in servers.values():
                stop(proc)
    for label, table in (("requests/s", rates), ("requests per CPU-second", cpu_rates)):
        plain, bounded = statistics.median(table[PLAIN]), statistics.median(table[BOUNDED])
        print(f"{label}: median plain {plain:,.0f}, bounded {bounded:,.0f}: bounded/plain = {bounded / plain:.3f}")


if __name__ == "__main__":
    main()
