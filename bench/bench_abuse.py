"""Hostile-client figures, measured over real HTTP against real uvicorn processes, printed (not asserted).

Parts (``--part``, default all):

keys     single-ID ``GET /v1/ids/wiji`` requests/s (wrk, one worker, alternating rounds, medians), for the default
         app (no key file), and the app with a key file whose quotas never bind, once with our token bucket and
         once each with the ``limits`` library's moving-window and fixed-window strategies (in-memory storage) in
         its place.
body     the server's VmRSS before and at peak while a client sends a 100 MB POST /v1/decode, declared
         (Content-Length) and chunked.
decode   single-ID latency (p50, p99; sequential client requests) alone and while two clients each POST 1 MB of log
         lines to /v1/decode.
streams  time until ``/healthz`` answers after 50 clients abort ``stream?count=100000000`` (each read ~1 MB first),
         and single-ID latency (p50, p99) alone and beside four streams of the same scheme, for eight-byte (capped
         at 64 IDs/ms) and uuidv7 (uncapped: the streams take all the CPU they can).
conns    against ``idmint serve`` (its connection layer): how many of 150 connections promising a body and sending
         none are still open 5 s after IDMINT_BODY_TIMEOUT (30 s); and under ``ulimit -n 256`` with 300 idle
         connections held, how many were refused (503) and held, whether ``/readyz`` stays 200 and leased IDs are
         issued (a few connections freed), and whether the log says "Too many open files".

Usage: python bench/bench_abuse.py [--part keys|body|decode|streams|conns] [--rounds 3] [--seconds 5]
Needs: wrk (apt-get install wrk) and the ``limits`` library (pip install -e '.[bench]') for ``keys``; curl.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BENCH_KEY = "bench-key-0123456789"
MB = 1024 * 1024


# -- app factories for the variants (uvicorn --factory bench.bench_abuse:<name>) ---------------------------------------


class LimitsBucket:
    """The ``limits`` library behind our TokenBucket's interface (take/charge), for the side-by-side figure."""

    strategy = "moving"

    def __init__(self, rate: float, clock: Any = None) -> None:
        from limits import RateLimitItemPerSecond
        from limits.storage import MemoryStorage
        from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

        self.rate = rate
        self.item = RateLimitItemPerSecond(int(rate))
        cls = MovingWindowRateLimiter if self.strategy == "moving" else FixedWindowRateLimiter
        self.limiter = cls(MemoryStorage())
        self.name = f"k{id(self)}"
        self.tokens = 0.0

    def take(self, cost: float, now: float) -> float:
        if self.limiter.hit(self.item, self.name, cost=int(min(cost, self.rate))):
            return 0.0
        reset, _ = self.limiter.get_window_stats(self.item, self.name)
        return max(reset - time.time(), 0.001)

    def charge(self, cost: float, now: float) -> float:
        return self.take(cost, now)


def _with_bucket(cls: type) -> Any:
    from app.api import auth
    from app.main import create_app

    auth.TokenBucket = cls  # type: ignore[misc,assignment]
    return create_app()


def keys_limits_moving() -> Any:
    LimitsBucket.strategy = "moving"
    return _with_bucket(LimitsBucket)


def keys_limits_fixed() -> Any:
    LimitsBucket.strategy = "fixed"
    return _with_bucket(LimitsBucket)


# -- process helpers --------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, target: list[str], env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            *target,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            "--no-access-log",
            "--log-level",
            "warning",
            "--loop",
            "uvloop",
            "--http",
            "httptools",
        ]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"server {target} did not become ready")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def wrk(url: str, seconds: int, connections: int, headers: list[str]) -> float:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s"]
    for header in headers:
        cmd += ["-H", header]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, check=True).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not match or "Non-2xx" in out:
        raise SystemExit(f"wrk output not understood or errors seen:\n{out}")
    return float(match.group(1))


def latencies(url: str, n: int, headers: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, non-200 answers) of ``n`` sequential requests on one keep-alive connection."""
    times = []
    bad = 0
    with httpx.Client(headers=headers, timeout=60) as client:
        for _ in range(n):
            t0 = time.perf_counter()
            r = client.get(url)
            times.append((time.perf_counter() - t0) * 1000)
            bad += r.status_code != 200
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))], bad


# -- parts ------------------------------------------------------------------------------------------------------------


def part_keys(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> None:
    keys = tmp / "keys.toml"
    keys.write_text(
        f'[[key]]\nname = "bench"\nsha256 = "{hashlib.sha256(BENCH_KEY.encode()).hexdigest()}"\n'
        'scopes = ["issue"]\nrequests_per_second = 100000000\nids_per_second = 1000000000\n'
    )
    auth = [f"Authorization: Bearer {BENCH_KEY}"]
    variants = [
        ("default, no key file", ["--factory", "app.main:create_app"], {}, []),
        ("keys, our token bucket", ["--factory", "app.main:create_app"], {"IDMINT_API_KEYS_FILE": str(keys)}, auth),
        (
            "keys, limits moving window",
            ["--factory", "bench.bench_abuse:keys_limits_moving"],
            {"IDMINT_API_KEYS_FILE": str(keys)},
            auth,
        ),
        (
            "keys, limits fixed window",
            ["--factory", "bench.bench_abuse:keys_limits_fixed"],
            {"IDMINT_API_KEYS_FILE": str(keys)},
            auth,
        ),
    ]
    servers = []
    try:
        for _, target, extra, _ in variants:
            servers.append(Server(target, {**env, **extra}))
        for server, (_, _, _, headers) in zip(servers, variants):
            wrk(server.url + "/v1/ids/wiji", 1, args.connections, headers)  # warm-up
        results: list[list[float]] = [[] for _ in variants]
        for _ in range(args.rounds):
            for i, (server, (_, _, _, headers)) in enumerate(zip(servers, variants)):
                results[i].append(wrk(server.url + "/v1/ids/wiji", args.seconds, args.connections, headers))
    finally:
        for server in servers:
            server.stop()
    base = statistics.median(results[0])
    print(
        f"keys: single-ID GET /v1/ids/wiji, medians of {args.rounds} alternating {args.seconds} s wrk rounds, "
        f"{args.connections} connections, one worker (ratio to the first line):"
    )
    for (label, *_), rps in zip(variants, results):
        med = statistics.median(rps)
        print(f"    {label:30s} {med:9,.0f} req/s  ratio {med / base:.3f}  all {[round(x) for x in rps]}")


def _post_huge(port: int, chunked: bool, total: int, pid: int) -> tuple[int, int, str]:
    """Send a ``total``-byte POST; (rss before KiB, peak KiB, status line or error)."""
    before = peak = rss_kib(pid)
    chunk = b"A" * 65536
    sent = 0
    status = "?"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        head += b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Content-Length: %d\r\n\r\n" % total
        sock.sendall(head)
        try:
            while sent < total:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                sent += len(chunk)
                if sent % (2 * MB) == 0:
                    peak = max(peak, rss_kib(pid))
        except OSError as exc:
            status = f"server closed after {sent / MB:.1f} MB sent ({exc.__class__.__name__})"
        try:
            line = sock.recv(200).split(b"\r\n")[0].decode()
            status = f"{line}; {status}" if status != "?" else line
        except OSError:
            pass
    return before, max(peak, rss_kib(pid)), status


def part_body(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> None:
    server = Server(["--factory", "app.main:create_app"], env)
    try:
        print("body: a 100 MB POST /v1/decode, server VmRSS before -> peak:")
        for chunked in (False, True):
            before, peak, status = _post_huge(server.port, chunked, 100 * MB, server.pid)
            kind = "chunked" if chunked else "declared"
            print(
                f"    {kind:9s} {before / 1024:6.1f} -> {peak / 1024:6.1f} MiB  (+{(peak - before) / 1024:.1f})  "
                f"{status}"
            )
    finally:
        server.stop()


def part_decode(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> None:
    server = Server(["--factory", "app.main:create_app"], env)
    line = "2026-11-21 12:00:01 ERROR order 01FZ11RQKT000002NAM48H248H failed for 5D5EAC793E61F-1BFC71B112D-0000000B\n"
    text = line * (1_000_000 // len(line))
    try:
        url = server.url + "/v1/ids/wiji"
        latencies(url, 200)
        alone = latencies(url, args.samples)
        stop = threading.Event()
        posted = [0]

        def poster() -> None:
            with httpx.Client(timeout=120) as client:
                while not stop.is_set():
                    client.post(server.url + "/v1/decode", json={"text": text})
                    posted[0] += 1

        threads = [threading.Thread(target=poster) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        beside = latencies(url, args.samples)
        stop.set()
        for t in threads:
            t.join()
        print(
            f"decode: single-ID latency alone p50 {alone[0]:.2f} ms p99 {alone[1]:.2f} ms; while two clients POST "
            f"1 MB texts ({posted[0]} decoded) p50 {beside[0]:.2f} ms p99 {beside[1]:.2f} ms "
            f"({args.samples} sequential requests each)"
        )
    finally:
        server.stop()


def part_streams(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> None:
    server = Server(["--factory", "app.main:create_app"], {**env, "IDMINT_MAX_CONCURRENT_STREAMS": "64"})
    try:
        socks = []
        for _ in range(50):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            s.sendall(b"GET /v1/ids/wiji/stream?count=100000000 HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(s)
        for s in socks:
            got = 0
            while got < MB:
                got += len(s.recv(65536))
        t0 = time.monotonic()
        for s in socks:
            s.close()
        while True:
            try:
                if httpx.get(server.url + "/healthz", timeout=120).status_code == 200:
                    break
            except httpx.TransportError:
                pass
        print(
            f"streams: /healthz answered {time.monotonic() - t0:.3f} s after 50 clients aborted "
            "stream?count=100000000 (each having read 1 MB)"
        )
        cpu = _cpu_seconds(server.pid)
        time.sleep(2)
        print(f"    server CPU in the 2 s after that: {_cpu_seconds(server.pid) - cpu:.2f} s")
    finally:
        server.stop()

    for scheme, count, width in (("eight-byte", 19_000_000, 17), ("uuidv7", 100_000_000, 37)):
        _beside_streams(args, env, scheme, count, width)


def _beside_streams(args: argparse.Namespace, env: dict[str, str], scheme: str, count: int, width: int) -> None:
    """Single-ID latency of ``scheme`` alone and beside four streams of it (``width`` bytes per line)."""
    server = Server(["--factory", "app.main:create_app"], env)
    try:
        url = f"{server.url}/v1/ids/{scheme}"
        latencies(url, 200)
        alone = latencies(url, args.samples)
        # The streams are read by curl processes (Python readers would compete with the latency client for the
        # GIL); each runs for a fixed time and reports the bytes it received.
        seconds = 3.0 + args.samples * 0.004
        curls = [
            subprocess.Popen(
                [
                    "curl",
                    "-s",
                    "-o",
                    "/dev/null",
                    "--max-time",
                    f"{seconds:.1f}",
                    "-w",
                    "%{size_download}",
                    f"{url}/stream?count={count}",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        time.sleep(1.0)
        beside = latencies(url, args.samples)
        received = sum(int(c.communicate()[0] or 0) for c in curls)
        print(
            f"    single-ID {scheme} latency alone p50 {alone[0]:.2f} ms p99 {alone[1]:.2f} ms; beside four "
            f"{scheme} streams p50 {beside[0]:.2f} ms p99 {beside[1]:.2f} ms (non-200: {beside[2]}); the "
            f"streams got {received / width / seconds / 1000:,.1f} IDs/ms together over {seconds:.1f} s "
            f"({args.samples} sequential single requests each)"
        )
    finally:
        server.stop()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(env: dict[str, str], tmp: Path, open_files: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    idmint = Path(sys.executable).parent / "idmint"
    cmd = [str(idmint), "serve", "--host", "127.0.0.1", "--port", str(port)]
    if open_files is not None:
        cmd = ["prlimit", f"--nofile={open_files}:{open_files}", "--", *cmd]
    log = open(tmp / f"serve-{port}.log", "wb")  # the child holds it
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**os.environ, **env, "IDMINT_STATE_DIR": str(tmp / f"s{port}")},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("idmint serve did not become ready")


def _still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
        return False  # closed by the server
    except BlockingIOError:
        return True
    except OSError:
        return False


def part_conns(args: argparse.Namespace, env: dict[str, str], tmp: Path) -> None:
    proc, url = _serve({**env, "IDMINT_KEEP_ALIVE_TIMEOUT": "600"}, tmp)
    port = int(url.rsplit(":", 1)[1])
    try:
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(150)]
        for i, sock in enumerate(socks):
            promise = b"Content-Length: 100" if i % 2 else b"Transfer-Encoding: chunked"
            sock.sendall(
                b"POST /v1/decode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n\r\n" % promise
            )
        time.sleep(10)
        at_10 = sum(_still_open(s) for s in socks)
        time.sleep(25)
        at_35 = sum(_still_open(s) for s in socks)
        print(
            f"conns: 150 bodies promised, none sent: {at_10} open at 10 s, {at_35} open at 35 s "
            "(IDMINT_BODY_TIMEOUT 30 s)"
        )
        for sock in socks:
            sock.close()
    finally:
        proc.terminate()
        proc.wait()
    proc, url = _serve(
        {**env, "IDMINT_KEEP_ALIVE_TIMEOUT": "600", "IDMINT_MAX_CONNECTIONS_PER_CLIENT": "100000"}, tmp, 256
    )
    port = int(url.rsplit(":", 1)[1])
    try:
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
        time.sleep(2)
        held = [s for s in socks if _still_open(s)]
        print(f"conns: ulimit -n 256, 300 idle connections: {len(held)} held, {300 - len(held)} refused (503)")
        for sock in held[:10]:
            sock.close()
        time.sleep(1)
        ready = httpx.get(url + "/readyz", timeout=30).status_code
        issued = httpx.get(url + "/v1/ids/snowflake?count=1000", timeout=30)
        time.sleep(5)  # the marks are written ahead, every few seconds
        again = httpx.get(url + "/v1/ids/snowflake?count=1000", timeout=30)
        log = next(tmp.glob(f"serve-{port}.log")).read_text(errors="replace")
        print(
            f"      /readyz {ready}, issue {issued.status_code} then {again.status_code}; "
            f"'Too many open files' in the log: {'Too many open files' in log}"
        )
        for sock in socks:
            sock.close()
    finally:
        proc.terminate()
        proc.wait()


PARTS = {"keys": part_keys, "body": part_body, "decode": part_decode, "streams": part_streams, "conns": part_conns}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=sorted(PARTS), action="append", help="which part (repeatable; default all)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--samples", type=int, default=2000, help="sequential requests per latency figure")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="idmint-bench-abuse-"))
    env = {"IDMINT_STATE_DIR": str(tmp / "state"), "PYTHONPATH": str(ROOT)}
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}", flush=True)
    try:
        for name in args.part or list(PARTS):
            if name == "keys" and not shutil.which("wrk"):
                raise SystemExit("wrk is needed: apt-get install wrk")
            if name == "keys" and importlib.util.find_spec("limits") is None:
                raise SystemExit("the limits library is needed: pip install -e '.[bench]'")
            PARTS[name](args, env, tmp)
            sys.stdout.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
