"""Server starts in the tests (tests/support/server.py), exec'd against forked from the fork server
(tests/support/forkserver.py): CPU seconds of the server process (user + sys, /proc/<pid>/stat) and wall seconds from
the start to the first 200 of /healthz, alternated, N starts each (default 20).

    .venv/bin/python bench/bench_test_starts.py [N]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import forkserver
from tests.support.server import Server

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime


def one(workdir: Path, fork: bool) -> tuple[float, float]:
    os.environ[forkserver.SWITCH] = "1" if fork else "0"
    started = time.monotonic()
    server = Server(workdir, {})
    server.wait("/healthz")
    wall = time.monotonic() - started
    cpu = cpu_s(server.pid)
    server.stop()
    assert server.forked == fork
    return cpu, wall


def alternate(one: Callable[[bool], tuple[float, float]], n: int, what: str, wall: str) -> None:
    """Run ``one(fork)`` exec'd then forked, ``n`` times each in turn, and print the load average before and after
    and each side's median (min..max) CPU and wall seconds (``wall`` names what the wall time runs to)."""
    results: dict[str, list[tuple[float, float]]] = {"exec": [], "fork": []}
    print(f"load average at start: {Path('/proc/loadavg').read_text().strip()}")
    for _ in range(n):
        for name in ("exec", "fork"):
            results[name].append(one(name == "fork"))
    print(f"load average at end: {Path('/proc/loadavg').read_text().strip()}")
    print(f"{what}: {n} each, alternated; median (min..max)")
    for name, rows in results.items():
        cpu = [c for c, _ in rows]
        times = [w for _, w in rows]
        print(
            f"  {name}: CPU {statistics.median(cpu):.2f} s ({min(cpu):.2f}..{max(cpu):.2f}), "
            f"{wall} {statistics.median(times):.2f} s ({min(times):.2f}..{max(times):.2f})"
        )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with tempfile.TemporaryDirectory() as tmp:
        one(Path(tmp), True)  # the zygote's own start, once per pytest process, is not a server start
        alternate(lambda fork: one(Path(tmp), fork), n, "server starts", "wall to /healthz")


if __name__ == "__main__":
    main()
