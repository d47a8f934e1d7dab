"""Benchmark idmint over real HTTP on this machine, in one run, and print the figures.

(a) single-ID requests/s: ``GET /v1/ids/wiji`` against idmint vs the bare ASGI app of bare_app.py, both served by
    uvicorn with one worker, the same flags, and loaded by wrk (Debian package ``wrk``) from a second process.
    Runs alternate (bare, idmint, bare, idmint, ...) and the ratio of medians is printed.
(b) streamed IDs/s per scheme: ``GET /v1/ids/{scheme}/stream?count=N`` read by curl into /dev/null, with the
    server's peak resident memory (VmRSS sampled every 20 ms) before and during the stream. Eight-byte is capped
    by its format at 64 IDs per ms per generator ID; it runs with --eight-byte-generators IDs held and is also
    reported as a fraction of that cap.

    With ``--baseline DIR`` (a checkout of another idmint revision, e.g. ``git worktree add /tmp/base main``), that
    revision's app is served too (same interpreter, its own state dir) and joins the alternation; the ratio of
    this revision to the baseline is printed.

(c) single-ID requests/s of each scheme in ``--request-schemes`` (default: the standard schemes uuidv7, ulid,
    typeid, ksuid, snowflake) beside wiji's, on one idmint server, rounds alternating wiji and the scheme; the
    ratio of medians (scheme / wiji) is printed.

Streams (b) cover ``--schemes`` (default: every registered scheme) and print each rate beside wiji's as a ratio;
snowflake is also reported as a fraction of its cap (2^S IDs per time unit per worker ID held).

Usage: python bench/bench_http.py [--count 10000000] [--rounds 3] [--seconds 5] [--eight-byte-generators 16]
                                  [--baseline DIR] [--skip-streams] [--skip-requests] [--schemes a,b,...]
                                  [--request-schemes a,b,...]
Needs: wrk and curl (apt-get install wrk curl). Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
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

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.schemes import schemes  # noqa: E402

SCHEMES = tuple(schemes())
STANDARD = ("uuidv7", "ulid", "typeid", "ksuid", "snowflake")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(target: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", *target, "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", "--no-access-log", "--log-level", "warning", "--loop", "uvloop", "--http", "httptools"]
    proc = subprocess.Popen(cmd, cwd=cwd, env={**os.environ, **env, "PYTHONPATH": str(cwd)})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code in (200, 404):
                return proc, base
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"server {target} did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def wrk(url: str, seconds: int, connections: int) -> float:
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", url], capture_output=True, text=True,
                         check=True).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not match or "Non-2xx" in out:
        raise SystemExit(f"wrk output not understood or errors seen:\n{out}")
    return float(match.group(1))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def stream(base: str, scheme: str, count: int, pid: int) -> tuple[float, int, int, int]:
    """(seconds, bytes, rss before KiB, peak rss KiB during)."""
    before = rss_kib(pid)
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download} %{time_total}",
                          f"{base}/v1/ids/{scheme}/stream?count={count}"], capture_output=True, text=True,
                         check=True).stdout.split()
    done.set()
    t.join()
    if out[0] != "200":
        raise SystemExit(f"stream {scheme} answered {out[0]}")
    return float(out[2]), int(out[1]), before, peak[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=10_000_000, help="IDs per stream (default 10,000,000)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating wrk rounds per app")
    ap.add_argument("--seconds", type=int, default=5, help="seconds per wrk round")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--eight-byte-generators", type=int, default=16)
    ap.add_argument("--skip-requests", action="store_true")
    ap.add_argument("--skip-streams", action="store_true")
    ap.add_argument("--baseline", type=Path, help="another idmint checkout to compare single-ID requests/s with")
    ap.add_argument("--schemes", default=",".join(SCHEMES), help="schemes to stream, comma-separated (wiji is "
                    "always included for the ratio)")
    ap.add_argument("--request-schemes", default=",".join(STANDARD),
                    help="schemes whose single-ID requests/s are compared with wiji's ('' = none)")
    args = ap.parse_args()
    streamed = [name for name in SCHEMES if name in {"wiji", *args.schemes.split(",")}]
    compared = [name for name in args.request_schemes.split(",") if name]
    for tool in ("wrk", "curl"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is needed: apt-get install {tool}")

    state = tempfile.mkdtemp(prefix="idmint-bench-")
    env = {"IDMINT_STATE_DIR": state, "IDMINT_EIGHT_BYTE_GENERATORS": str(args.eight_byte_generators),
           "IDMINT_MAX_STREAM_COUNT": str(max(args.count, 100_000_000))}
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")

    if not args.skip_requests:
        bare, bare_url = start(["bench.bare_app:app"], env)
        idm, idm_url = start(["--factory", "app.main:create_app"], env)
        base = base_url = None
        if args.baseline is not None:
            base_env = {**env, "IDMINT_STATE_DIR": tempfile.mkdtemp(prefix="idmint-bench-base-")}
            base, base_url = start(["--factory", "app.main:create_app"], base_env, cwd=args.baseline.resolve())
        try:
            for url in (bare_url + "/", idm_url + "/v1/ids/wiji", *([base_url + "/v1/ids/wiji"] if base_url else [])):
                wrk(url, 1, args.connections)  # warm-up
            bare_rps, idm_rps, base_rps = [], [], []
            for _ in range(args.rounds):
                bare_rps.append(wrk(bare_url + "/", args.seconds, args.connections))
                idm_rps.append(wrk(idm_url + "/v1/ids/wiji", args.seconds, args.connections))
                if base_url:
                    base_rps.append(wrk(base_url + "/v1/ids/wiji", args.seconds, args.connections))
            b, i = statistics.median(bare_rps), statistics.median(idm_rps)
            print(f"(a) single-ID GET /v1/ids/wiji: idmint {i:,.0f} req/s, bare ASGI {b:,.0f} req/s, "
                  f"ratio {i / b:.2f}  (medians of {args.rounds} alternating {args.seconds}s wrk rounds, "
                  f"{args.connections} connections; all: idmint {[round(x) for x in idm_rps]}, "
                  f"bare {[round(x) for x in bare_rps]})")
            if base_rps:
                m = statistics.median(base_rps)
                print(f"    baseline {args.baseline}: {m:,.0f} req/s; this revision / baseline = {i / m:.3f} "
                      f"(all: {[round(x) for x in base_rps]})")
        finally:
            stop(bare)
            stop(idm)
            if base is not None:
                stop(base)

    if not args.skip_requests and compared:
        idm, idm_url = start(["--factory", "app.main:create_app"], env)
        try:
            print(f"(c) single-ID GET /v1/ids/{{scheme}} beside wiji, one idmint server (medians of {args.rounds} "
                  f"alternating {args.seconds}s wrk rounds, {args.connections} connections):")
            for scheme in compared:
                urls = {name: f"{idm_url}/v1/ids/{name}" for name in ("wiji", scheme)}
                for url in urls.values():
                    wrk(url, 1, args.connections)  # warm-up
                rps: dict[str, list[float]] = {"wiji": [], scheme: []}
                for _ in range(args.rounds):
                    for name, url in urls.items():
                        rps[name].append(wrk(url, args.seconds, args.connections))
                w, x = statistics.median(rps["wiji"]), statistics.median(rps[scheme])
                print(f"    {scheme:10s} {x:10,.0f} req/s  wiji {w:10,.0f} req/s  ratio {x / w:.3f}  "
                      f"(all: {[round(v) for v in rps[scheme]]} vs {[round(v) for v in rps['wiji']]})", flush=True)
        finally:
            stop(idm)

    if args.skip_streams:
        return
    idm, idm_url = start(["--factory", "app.main:create_app"], env)
    try:
        print(f"(b) streams of {args.count:,} IDs, one worker:")
        wiji_rate = None
        for scheme in sorted(streamed, key=lambda name: name != "wiji"):  # wiji first: the others' reference
            count = args.count
            seconds, size, before, peak = stream(idm_url, scheme, count, idm.pid)
            rate = count / seconds
            wiji_rate = wiji_rate or rate
            line = (f"    {scheme:10s} {rate / 1e6:7.2f} M IDs/s  {size / seconds / 1e6:7.1f} MB/s  "
                    f"{seconds:6.2f} s  rss {before / 1024:.0f} -> peak {peak / 1024:.0f} MiB  "
                    f"x{rate / wiji_rate:.2f} of wiji")
            if scheme == "eight-byte":
                cap = 64_000 * args.eight_byte_generators
                line += f"  ({rate / cap:.1%} of the format cap for {args.eight_byte_generators} generator IDs)"
            if scheme == "snowflake":
                described = {s["name"]: s for s in httpx.get(idm_url + "/v1/schemes").json()["schemes"]}
                cap = described["snowflake"].get("limits", {}).get("ids_per_second")
                if cap:
                    line += f"  ({rate / cap:.1%} of its cap, {cap:,} IDs/s for the worker IDs held)"
            print(line, flush=True)
    finally:
        stop(idm)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
