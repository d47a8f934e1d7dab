"""Benchmark the Python client's hot path, ``Client.new_id()`` from a warm buffer, and print the figures.

Against one ``idmint serve`` worker on loopback (started here, own state dir), in one run, side by side with the
anchor, uuid-utils' ``uuid7()`` in-process (the Rust UUIDv7 generator: what "in-process speed" means):

(a) throughput: one thread calls ``new_id(scheme)`` for ``--seconds`` (default 10), counted in blocks of 1000;
    prints IDs/s over the whole run and the slowest 1-second window, and the server's CPU use during the run
    (utime+stime from /proc, as a share of one core and of the client's own CPU);
(b) latency: one thread times every call with ``perf_counter_ns`` for ``--seconds``; prints p50, p99, p99.9, max
    (the timer's own cost is included);
(c) the cost a ``os.getpid()`` check on every call would add (the client uses ``os.register_at_fork`` instead).

Usage: python bench/bench_client.py [--seconds 10] [--scheme wiji] [--rounds 1]
Needs: the client (pip install -e clients/python) and uuid-utils (dev extras). Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import array
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import uuid_utils
from idmint_client import Client

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 1000
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(state_dir: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "IDMINT_STATE_DIR": state_dir, "IDMINT_LOG_LEVEL": "warning"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("idmint serve did not become ready")


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def throughput(draw: Callable[[], object], seconds: float, server_pid: int | None) -> dict[str, float]:
    """IDs/s over ``seconds`` (blocks of BLOCK calls), the slowest 1-s window, and CPU shares."""
    windows: list[float] = []
    total = 0
    server0 = cpu_s(server_pid) if server_pid else 0.0
    own0 = time.process_time()
    start = window_start = time.perf_counter()
    window_n = 0
    end = start + seconds
    now = start
    while now < end:
        for _ in range(BLOCK):
            draw()
        total += BLOCK
        window_n += BLOCK
        now = time.perf_counter()
        if now - window_start >= 1.0:
            windows.append(window_n / (now - window_start))
            window_start, window_n = now, 0
    wall = now - start
    own = time.process_time() - own0
    server = (cpu_s(server_pid) - server0) if server_pid else 0.0
    return {
        "rate": total / wall,
        "slowest_window": min(windows) if windows else total / wall,
        "server_core_share": server / wall,
        "client_core_share": own / wall,
        "server_cpu_s": server,
        "client_cpu_s": own,
    }


def latency(draw: Callable[[], object], seconds: float) -> dict[str, float]:
    """Per-call latency percentiles (ns) over ``seconds``."""
    samples = array.array("q")
    append = samples.append
    clock = time.perf_counter_ns
    end = clock() + int(seconds * 1e9)
    while True:
        for _ in range(BLOCK):
            t0 = clock()
            draw()
            append(clock() - t0)
        if clock() >= end:
            break
    ordered = sorted(samples)
    n = len(ordered)
    return {
        "n": n,
        "p50": ordered[n // 2],
        "p99": ordered[int(n * 0.99)],
        "p999": ordered[int(n * 0.999)],
        "max": ordered[-1],
    }


def per_call_ns(fn: Callable[[], object], number: int = 1_000_000) -> float:
    start = time.perf_counter_ns()
    for _ in range(number):
        fn()
    return (time.perf_counter_ns() - start) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--scheme", default="wiji")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(
        f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, uuid-utils "
        f"{getattr(uuid_utils, '__version__', '?')}, load average {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory() as state:
        proc, base = start_server(state)
        try:
            with Client(base) as client:
                scheme = args.scheme

                def new_id() -> str:
                    return client.new_id(scheme)

                for _ in range(200_000):  # warm: the buffer has grown to its steady refill size
                    new_id()

                def anchor_str() -> str:
                    return str(uuid_utils.uuid7())

                results: dict[str, list[dict[str, float]]] = {"anchor": [], "anchor_str": [], "client": []}
                lat: dict[str, list[dict[str, float]]] = {"anchor": [], "client": []}
                for r in range(args.rounds):
                    results["anchor"].append(throughput(uuid_utils.uuid7, args.seconds, None))
                    results["anchor_str"].append(throughput(anchor_str, args.seconds, None))
                    results["client"].append(throughput(new_id, args.seconds, proc.pid))
                    lat["anchor"].append(latency(uuid_utils.uuid7, args.seconds))
                    lat["client"].append(latency(new_id, args.seconds))
                    print(
                        f"round {r + 1}: anchor {results['anchor'][-1]['rate']:,.0f}/s, "
                        f"client {results['client'][-1]['rate']:,.0f}/s"
                    )
                stats = client.stats()
        finally:
            proc.terminate()
            proc.wait(10)

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    anchor_rate, client_rate = med(results["anchor"], "rate"), med(results["client"], "rate")
    print(f"\n(a) throughput, one thread, {args.seconds:g} s per run, medians of {args.rounds} round(s)")
    print(
        f"  uuid_utils.uuid7()     {anchor_rate:>12,.0f} IDs/s   slowest 1-s window "
        f"{med(results['anchor'], 'slowest_window'):,.0f}"
    )
    str_rate = med(results["anchor_str"], "rate")
    print(
        f"  str(uuid7()) (text)    {str_rate:>12,.0f} IDs/s   slowest 1-s window "
        f"{med(results['anchor_str'], 'slowest_window'):,.0f}   = {str_rate / anchor_rate:.2f} x the anchor"
    )
    print(
        f"  Client.new_id({scheme!r}) {client_rate:>10,.0f} IDs/s   slowest 1-s window "
        f"{med(results['client'], 'slowest_window'):,.0f}   = {client_rate / anchor_rate:.2f} x the anchor"
    )
    print("  per CPU-second of this process (the machine is shared: a thread gets what the scheduler gives):")
    for name in ("anchor", "anchor_str", "client"):
        per_cpu = med(results[name], "rate") / med(results[name], "client_core_share")
        print(
            f"    {name:10s} {per_cpu:>12,.0f} IDs per CPU-second   "
            f"({med(results[name], 'client_core_share'):.0%} of a core)   "
            f"= {per_cpu / (anchor_rate / med(results['anchor'], 'client_core_share')):.2f} x the anchor"
        )
    server_share = med(results["client"], "server_core_share")
    client_share = med(results["client"], "client_core_share")
    print(
        f"  server (one worker) CPU during the client run: {server_share:.1%} of one core "
        f"({server_share / (server_share + client_share):.1%} of client+server CPU); client process "
        f"{client_share:.1%} of one core"
    )
    print(f"\n(b) latency per call (ns, timer included), {args.seconds:g} s per run")
    for name in ("anchor", "client"):
        rows = lat[name]
        print(
            f"  {name:7s} n={med(rows, 'n'):,.0f}  p50 {med(rows, 'p50'):,.0f}  p99 {med(rows, 'p99'):,.0f}  "
            f"p99.9 {med(rows, 'p999'):,.0f}  max {med(rows, 'max'):,.0f}"
        )
    print(
        f"  ratios client/anchor: p50 {med(lat['client'], 'p50') / med(lat['anchor'], 'p50'):.2f}, "
        f"p99 {med(lat['client'], 'p99') / med(lat['anchor'], 'p99'):.2f}"
    )
    for s in stats:
        print(
            f"  buffer {s.scheme}: refill size {s.refill_size:,}, {s.refills:,} refills, {s.issued:,} issued, "
            f"{s.expired:,} expired unused, {s.misses} misses (draws that waited for the server)"
        )
    getpid_ns = per_call_ns(os.getpid)
    nothing_ns = per_call_ns(int)
    print(
        f"\n(c) fork detection: an os.getpid() check per call would cost {getpid_ns:.0f} ns "
        f"(int() for scale: {nothing_ns:.0f} ns), i.e. {getpid_ns * client_rate / 1e9:.0%} of new_id's time at the "
        "rate above; os.register_at_fork costs nothing per call"
    )


if __name__ == "__main__":
    main()
