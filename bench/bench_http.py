"""Benchmark idmint over real HTTP on this machine, in one run, and print the figures.

(a) single-ID requests/s, rounds alternating four servers, each uvicorn with one worker and the same flags, loaded
    by wrk (Debian package ``wrk``) from a second process: the bare ASGI app of bare_app.py (uvicorn's own httptools
    protocol), idmint ``GET /v1/ids/wiji`` without API keys, idmint with an API key file (each request carrying a
    key without quotas), and ``GET /v1/ids/uuidv7`` from the stock FastAPI + uuid-utils service (stock_app.py).
    idmint runs the protocol ``idmint serve`` runs (``--http idmint``, app.serving's, which answers the hot routes
    itself) unless ``--http httptools``. Printed per server: the median requests/s and its ratio to bare and to
    stock, the requests per second the server spent on a CPU (/proc schedstat: what a request costs the server,
    which the shared machine's other processes disturb less than wall-clock rates), user and system CPU
    microseconds per request (/proc/PID/stat), the median p99 latency (wrk --latency), and every round's figure.
    Goals: idmint at least 0.7 of bare with and without keys, p99 under 2 ms at 32 connections, at least
    3x stock.
(b) streamed IDs/s per scheme: ``GET /v1/ids/{scheme}/stream?count=N`` (10,000,000 by default) read by curl into
    /dev/null, with the server's peak resident memory (VmRSS sampled every 20 ms) before and during the stream.
    ``--stream-rounds`` rounds; in each, per scheme: a wiji stream, the scheme's stream, then two ceilings sending
    fixed lines of the scheme's width in idmint's chunk size, no ID generated: the bare ASGI app (bare_app.py
    ``/stream``, through uvicorn's framing) and the raw server (raw_server.py ``/stream``: pre-built chunked frames
    handed to a uvloop transport, the bytes-per-second ceiling of loopback and the reader). Printed per scheme:
    median and best IDs/s, the median of the per-round ratios to wiji and to each ceiling, the median MB/s of the
    stream and of each ceiling (bytes read by curl, 10^6 per MB), and the target (ulid/typeid 20M/s, uuidv7 15M/s,
    ksuid 5M/s, snowflake 95% of its cap: 2^S IDs per unit per worker ID held, ``--snowflake-workers`` held).
    Eight-byte is capped by its format at 64 IDs per ms per generator ID (--eight-byte-generators IDs held).

    With ``--baseline DIR`` (a checkout of another idmint revision, e.g. ``git archive <rev> | tar -x -C DIR``),
    that revision's app is served too, without and with the API key file (same interpreter, its own state dirs, its
    own app.serving protocol), and joins the alternation of (a), without keys of (d), and of (b) (its own wiji
    stream and the scheme's, after this revision's in each round); its ratios are printed.

(c) single-ID requests/s of each scheme in ``--request-schemes`` (default: every scheme but wiji) beside wiji's,
    on one idmint server, rounds alternating wiji and the scheme; the ratio of medians (scheme / wiji) is printed,
    the same for requests per second the server spent on a CPU (/proc schedstat), which the shared machine's other
    processes disturb less, and the median p99 latency (wrk --latency). Target: at least 0.85 of wiji's.
(d) ``GET /v1/ids/uuidv7?count=N`` (``--stock-counts``, default 1 and 1000) from idmint and from the service a team
    would write instead (bench/stock_app.py: stock FastAPI returning uuid-utils' UUIDv7s), rounds alternating;
    the ratio idmint / stock is printed. ``--stock-schemes`` adds idmint's other schemes, each against the same
    stock uuidv7. Target: 3x for single IDs, 5x for count=1000.

Streams (b) cover ``--schemes`` (default: every registered scheme).

Usage: python bench/bench_http.py [--no-pin] [--count 10000000] [--rounds 3] [--seconds 5] [--eight-byte-generators 16]
                                  [--stream-rounds 3] [--snowflake-workers 1] [--baseline DIR] [--http idmint|httptools]
                                  [--skip-streams] [--skip-requests] [--schemes a,b,...]
                                  [--request-schemes a,b,...] [--skip-stock] [--stock-counts 1,1000]
                                  [--stock-schemes uuidv7,ulid]
Needs: wrk and curl (apt-get install wrk curl). Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import hashlib
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
from typing import NamedTuple

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from app.schemes import schemes  # noqa: E402

SCHEMES = tuple(schemes())
OTHERS = tuple(name for name in SCHEMES if name != "wiji")
TARGETS = {"ulid": 20e6, "typeid": 20e6, "uuidv7": 15e6, "ksuid": 5e6}
"""Streamed IDs/s each scheme should reach (snowflake: 95% of its cap)."""
CAPPED = ("snowflake", "eight-byte")
"""Schemes whose streams the clock bounds (no HTTP ceiling measured beside them)."""


IDMINT_PROTOCOL = "app.serving:BoundedHttpToolsProtocol"
"""The protocol ``idmint serve`` runs (app.serving.PROTOCOL_IMPORT), which idmint's servers here are served with."""
IDMINT = ["--factory", "app.main:create_app"]
"""uvicorn's app arguments for idmint."""
RAW = ["<raw>"]
"""Stands for bench/raw_server.py (uvloop + httptools, a fixed response in one write: the ceiling) in (a)."""
SERVER_CPU, CLIENT_CPU = "0", "1"
"""With ``--pin`` (the default on a machine of two or more CPUs), every server runs on CPU 0 and wrk on CPU 1."""
PIN = {"on": False}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def uvicorn_command(target: list[str], port: int, http: str = "httptools") -> list[str]:
    """The command serving ``target`` (uvicorn's app arguments) on loopback ``port``: one worker, uvloop, no access
    log; the flags every benchmark here serves its apps with."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        *target,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--no-access-log",
        "--log-level",
        "warning",
        "--loop",
        "uvloop",
        "--http",
        http,
    ]


def start(
    target: list[str], env: dict[str, str], cwd: Path = ROOT, http: str = "httptools"
) -> tuple[subprocess.Popen[bytes], str]:
    """Serve ``target`` from ``cwd`` with protocol ``http`` on a free port; returns (process, base URL) once it
    answers."""
    port = free_port()
    if target == RAW:
        cmd = [sys.executable, str(ROOT / "bench" / "raw_server.py"), str(port)]
    else:
        cmd = uvicorn_command(target, port, http)
    if PIN["on"]:
        cmd = ["taskset", "-c", SERVER_CPU, *cmd]
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
    out = subprocess.run(
        [*wrk_prefix(), "-t1", f"-c{connections}", f"-d{seconds}s", url], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not match or "Non-2xx" in out:
        raise SystemExit(f"wrk output not understood or errors seen:\n{out}")
    return float(match.group(1))


def wrk_prefix() -> list[str]:
    """wrk's command, pinned to CLIENT_CPU with ``--pin``."""
    return ["taskset", "-c", CLIENT_CPU, "wrk"] if PIN["on"] else ["wrk"]


class Round(NamedTuple):
    """One wrk round against one server."""

    rate: float
    """Requests per second."""
    per_cpu: float
    """Requests per second the server spent on a CPU (all its threads, /proc schedstat)."""
    p99_ms: float
    user_us: float
    """User CPU microseconds per request (/proc/PID/stat, all threads)."""
    system_us: float
    """System CPU microseconds per request."""


def wrk_round(url: str, seconds: int, connections: int, pid: int, headers: tuple[str, ...] = ()) -> Round:
    """One wrk round (``--latency``; each ``headers`` entry sent with every request) against server ``pid``."""
    cpu0, _ = sched_ns(pid)
    user0, system0 = cpu_ticks(pid)
    command = [*wrk_prefix(), "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    for header in headers:
        command += ["-H", header]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    cpu1, _ = sched_ns(pid)
    user1, system1 = cpu_ticks(pid)
    rate, done = re.search(r"Requests/sec:\s+([\d.]+)", out), re.search(r"(\d+) requests in", out)
    p99 = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
    if not rate or not done or not p99 or "Non-2xx" in out:
        raise SystemExit(f"wrk output not understood or errors seen:\n{out}")
    p99_ms = float(p99.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[p99.group(2)]
    requests = int(done.group(1))
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    return Round(
        float(rate.group(1)),
        requests / ((cpu1 - cpu0) / 1e9),
        p99_ms,
        (user1 - user0) * tick_us / requests,
        (system1 - system0) * tick_us / requests,
    )


def wrk_cpu(url: str, seconds: int, connections: int, pid: int) -> tuple[float, float, float]:
    """(requests/s, requests per second the server spent on a CPU, p99 latency in ms) of one wrk round against
    server ``pid``."""
    got = wrk_round(url, seconds, connections, pid)
    return got.rate, got.per_cpu, got.p99_ms


def cpu_ticks(pid: int) -> tuple[int, int]:
    """(user, system) CPU time of process ``pid``, all its threads, in clock ticks (/proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[11]), int(fields[12])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def sched_ns(pid: int) -> tuple[int, int]:
    """(ns on a CPU, ns runnable but waiting for one) summed over the process's threads (/proc/PID/task/*/schedstat)."""
    on_cpu = waiting = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:  # a thread that just ended
            continue
        on_cpu += int(fields[0])
        waiting += int(fields[1])
    return on_cpu, waiting


class Streamed(NamedTuple):
    seconds: float
    size: int
    rss_before_kib: int
    rss_peak_kib: int
    cpu_s: float
    """Seconds the server spent on a CPU during the stream (all its threads)."""
    wait_s: float
    """Seconds the server was runnable but waited for a CPU (other processes on the shared cores)."""


def stream(base: str, scheme: str, count: int, pid: int) -> Streamed:
    """One stream read by curl into /dev/null, with the server's resident memory and CPU figures."""
    before = rss_kib(pid)
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            time.sleep(0.02)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    cpu0, wait0 = sched_ns(pid)
    seconds, size = curl_to_null(f"{base}/v1/ids/{scheme}/stream?count={count}")
    cpu1, wait1 = sched_ns(pid)
    done.set()
    t.join()
    return Streamed(seconds, size, before, peak[0], (cpu1 - cpu0) / 1e9, (wait1 - wait0) / 1e9)


def curl_to_null(url: str) -> tuple[float, int]:
    """(seconds, bytes) of ``url`` read by curl into /dev/null; exits unless it answered 200."""
    out = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download} %{time_total}", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if out[0] != "200":
        raise SystemExit(f"{url} answered {out[0]}")
    return float(out[2]), int(out[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=10_000_000, help="IDs per stream (default 10,000,000)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating wrk rounds per app")
    ap.add_argument("--seconds", type=int, default=5, help="seconds per wrk round")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--eight-byte-generators", type=int, default=16)
    ap.add_argument("--stream-rounds", type=int, default=3, help="rounds of streams (wiji, scheme, ceiling each)")
    ap.add_argument("--snowflake-workers", type=int, default=1, help="IDMINT_SNOWFLAKE_WORKERS for the streams")
    ap.add_argument("--skip-requests", action="store_true")
    ap.add_argument("--skip-streams", action="store_true")
    ap.add_argument("--baseline", type=Path, help="another idmint checkout to compare single-ID requests/s with")
    ap.add_argument("--skip-stock", action="store_true", help="skip (d), the stock FastAPI + uuid-utils comparison")
    ap.add_argument("--stock-counts", default="1,1000", help="counts compared in (d), comma-separated")
    ap.add_argument(
        "--stock-schemes",
        default="uuidv7",
        help="idmint schemes compared in (d) with the stock service's uuidv7, comma-separated",
    )
    ap.add_argument(
        "--schemes",
        default=",".join(SCHEMES),
        help="schemes to stream, comma-separated (wiji is always included for the ratio)",
    )
    ap.add_argument(
        "--request-schemes",
        default=",".join(OTHERS),
        help="schemes whose single-ID requests/s are compared with wiji's (default: every other; '' = none)",
    )
    ap.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run every server on CPU 0 and wrk on CPU 1 (default on)",
    )
    ap.add_argument(
        "--http", choices=("idmint", "httptools"), default="idmint", help="the protocol idmint's servers run"
    )
    args = ap.parse_args()
    args.protocol = IDMINT_PROTOCOL if args.http == "idmint" else "httptools"
    PIN["on"] = args.pin and (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
    streamed = [name for name in SCHEMES if name in {"wiji", *args.schemes.split(",")}]
    compared = [name for name in args.request_schemes.split(",") if name]
    for tool in ("wrk", "curl"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is needed: apt-get install {tool}")

    state = tempfile.mkdtemp(prefix="idmint-bench-")
    env = {
        "IDMINT_STATE_DIR": state,
        "IDMINT_EIGHT_BYTE_GENERATORS": str(args.eight_byte_generators),
        "IDMINT_MAX_STREAM_COUNT": str(max(args.count, 100_000_000)),
    }
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")

    if not args.skip_requests:
        single_ids(args, env)

    if not args.skip_requests and compared:
        idm, idm_url = start(IDMINT, env, http=args.protocol)
        try:
            print(
                f"(c) single-ID GET /v1/ids/{{scheme}} beside wiji, one idmint server (medians of {args.rounds} "
                f"alternating {args.seconds}s wrk rounds, {args.connections} connections):"
            )
            for scheme in compared:
                urls = {name: f"{idm_url}/v1/ids/{name}" for name in ("wiji", scheme)}
                for url in urls.values():
                    wrk(url, 1, args.connections)  # warm-up
                rps: dict[str, list[float]] = {"wiji": [], scheme: []}
                per_cpu: dict[str, list[float]] = {"wiji": [], scheme: []}
                p99: dict[str, list[float]] = {"wiji": [], scheme: []}
                for _ in range(args.rounds):
                    for name, url in urls.items():
                        rate, cpu_rate, p99_ms = wrk_cpu(url, args.seconds, args.connections, idm.pid)
                        rps[name].append(rate)
                        per_cpu[name].append(cpu_rate)
                        p99[name].append(p99_ms)
                w, x = statistics.median(rps["wiji"]), statistics.median(rps[scheme])
                wc, xc = statistics.median(per_cpu["wiji"]), statistics.median(per_cpu[scheme])
                print(
                    f"    {scheme:10s} {x:10,.0f} req/s  wiji {w:10,.0f} req/s  ratio {x / w:.3f};  per server "
                    f"CPU-s {xc:8,.0f} vs {wc:8,.0f}  ratio {xc / wc:.3f};  p99 {statistics.median(p99[scheme]):.2f} "
                    f"ms vs {statistics.median(p99['wiji']):.2f} ms  "
                    f"(all req/s: {[round(v) for v in rps[scheme]]} vs {[round(v) for v in rps['wiji']]})",
                    flush=True,
                )
        finally:
            stop(idm)

    if not args.skip_requests and not args.skip_stock:
        stock_comparison(args, env)

    if args.skip_streams:
        return
    stream_env = {**env, "IDMINT_SNOWFLAKE_WORKERS": str(args.snowflake_workers)}
    idm, idm_url = start(IDMINT, stream_env, http=args.protocol)
    bare, bare_url = start(["bench.bare_app:app"], env)
    raw, raw_url = start(RAW, env)
    base: tuple[subprocess.Popen[bytes], str] | None = None
    base_state = tempfile.mkdtemp(prefix="idmint-bench-base-streams-") if args.baseline is not None else ""
    try:
        if args.baseline is not None:
            base_env = {**stream_env, "IDMINT_STATE_DIR": base_state}
            base = start(IDMINT, base_env, cwd=args.baseline.resolve(), http=args.protocol)
        run_streams(args, streamed, idm, idm_url, bare_url, raw_url, base)
    finally:
        stop(idm)
        stop(bare)
        stop(raw)
        if base is not None:
            stop(base[0])
        shutil.rmtree(state, ignore_errors=True)
        if base_state:
            shutil.rmtree(base_state, ignore_errors=True)


KEY = "bench-key"
"""The API key idmint's keyed server in (a) is asked with (its file holds it without quotas)."""


def single_ids(args: argparse.Namespace, env: dict[str, str]) -> None:
    """(a): bare, idmint, idmint with an API key file, stock (and the baseline), rounds alternating."""
    keys = Path(env["IDMINT_STATE_DIR"]) / "bench-keys.toml"
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    keys.write_text(f'[[key]]\nname = "bench"\nsha256 = "{digest}"\nscopes = ["issue"]\n')
    keyed_env = {**env, "IDMINT_STATE_DIR": tempfile.mkdtemp(prefix="idmint-bench-keyed-")}
    keyed_env["IDMINT_API_KEYS_FILE"] = str(keys)
    rows: list[tuple[str, list[str], dict[str, str], Path, str, str, tuple[str, ...]]] = [
        ("bare ASGI app", ["bench.bare_app:app"], env, ROOT, "httptools", "/", ()),
        ("raw server", RAW, env, ROOT, "httptools", "/", ()),
        ("idmint", IDMINT, env, ROOT, args.protocol, "/v1/ids/wiji", ()),
        (
            "idmint + API keys",
            IDMINT,
            keyed_env,
            ROOT,
            args.protocol,
            "/v1/ids/wiji",
            (f"Authorization: Bearer {KEY}",),
        ),
        ("stock FastAPI", ["bench.stock_app:app"], env, ROOT, "httptools", "/v1/ids/uuidv7", ()),
    ]
    if args.baseline is not None:
        base_env = {**env, "IDMINT_STATE_DIR": tempfile.mkdtemp(prefix="idmint-bench-base-")}
        rows.append(("baseline", IDMINT, base_env, args.baseline.resolve(), args.protocol, "/v1/ids/wiji", ()))
        keyed_base_env = {**keyed_env, "IDMINT_STATE_DIR": tempfile.mkdtemp(prefix="idmint-bench-base-keyed-")}
        rows.append(
            (
                "baseline + API keys",
                IDMINT,
                keyed_base_env,
                args.baseline.resolve(),
                args.protocol,
                "/v1/ids/wiji",
                (f"Authorization: Bearer {KEY}",),
            )
        )
    servers = []
    try:
        for _, target, row_env, cwd, http, path, headers in rows:
            proc, url = start(target, row_env, cwd=cwd, http=http)
            servers.append((proc, url + path, headers))
            wrk_round(url + path, 1, args.connections, proc.pid, headers)  # warm-up
        rounds: list[list[Round]] = [[] for _ in rows]
        for _ in range(args.rounds):
            for i, (proc, url, headers) in enumerate(servers):
                rounds[i].append(wrk_round(url, args.seconds, args.connections, proc.pid, headers))
    finally:
        for proc, _, _ in servers:
            stop(proc)
    median = [statistics.median(r.rate for r in got) for got in rounds]
    print(
        f"(a) single IDs, {args.rounds} rounds alternating {len(rows)} servers, wrk {args.seconds} s at "
        f"{args.connections} connections, idmint on {args.protocol}, pinned: {PIN['on']}; medians, then every "
        "round's requests/s:"
    )
    print(
        f"    {'server':18s} {'req/s':>9s} {'x bare':>7s} {'x raw':>7s} {'x stock':>7s} {'per CPU-s':>9s} "
        f"{'x bare':>7s} {'user us':>7s} {'sys us':>7s} {'p99 ms':>7s}"
    )
    per_cpu = [statistics.median(r.per_cpu for r in got) for got in rounds]
    for (name, *_), got, rate, cpu in zip(rows, rounds, median, per_cpu):
        print(
            f"    {name:18s} {rate:9,.0f} {rate / median[0]:7.2f} {rate / median[1]:7.2f} {rate / median[4]:7.2f} "
            f"{cpu:9,.0f} {cpu / per_cpu[0]:7.2f} {statistics.median(r.user_us for r in got):7.1f} "
            f"{statistics.median(r.system_us for r in got):7.1f} {statistics.median(r.p99_ms for r in got):7.2f}"
            f"   {[round(r.rate) for r in got]}",
            flush=True,
        )


def stock_comparison(args: argparse.Namespace, env: dict[str, str]) -> None:
    """(d): ``GET /v1/ids/uuidv7?count=N`` from idmint and from bench/stock_app.py (stock FastAPI + uuid-utils, the
    service a team would write instead), rounds alternating, for each N in ``--stock-counts`` (with ``--baseline``,
    that revision's idmint joins the alternation: its requests/s and its own ratio to stock are printed too)."""
    servers = {"idmint": start(IDMINT, env, http=args.protocol), "stock": start(["bench.stock_app:app"], env)}
    if args.baseline is not None:
        base_env = {**env, "IDMINT_STATE_DIR": tempfile.mkdtemp(prefix="idmint-bench-base-")}
        servers["baseline"] = start(IDMINT, base_env, cwd=args.baseline.resolve(), http=args.protocol)
    try:
        print(
            f"(d) GET /v1/ids/uuidv7?count=N, idmint vs stock FastAPI + uuid-utils (bench/stock_app.py), medians of "
            f"{args.rounds} alternating {args.seconds}s wrk rounds, {args.connections} connections:"
        )
        for scheme, count in ((x, int(n)) for x in args.stock_schemes.split(",") for n in args.stock_counts.split(",")):
            urls = {
                name: f"{url}/v1/ids/{'uuidv7' if name == 'stock' else scheme}?count={count}"
                for name, (_, url) in servers.items()
            }
            for url in urls.values():
                wrk(url, 1, args.connections)  # warm-up
            rps: dict[str, list[float]] = {name: [] for name in urls}
            per_cpu: dict[str, list[float]] = {name: [] for name in urls}
            for _ in range(args.rounds):
                for name, url in urls.items():
                    rate, cpu_rate, _p99 = wrk_cpu(url, args.seconds, args.connections, servers[name][0].pid)
                    rps[name].append(rate)
                    per_cpu[name].append(cpu_rate)
            i, s = statistics.median(rps["idmint"]), statistics.median(rps["stock"])
            ic, sc = statistics.median(per_cpu["idmint"]), statistics.median(per_cpu["stock"])
            if scheme != "uuidv7":
                print(f"    idmint's {scheme} against the stock service's uuidv7:")
            print(
                f"    count={count:<6d} idmint {i:10,.0f} req/s  stock {s:10,.0f} req/s  idmint / stock = {i / s:.2f}; "
                f"per server CPU-s {ic:,.0f} vs {sc:,.0f} = {ic / sc:.2f}  "
                f"(all: {[round(v) for v in rps['idmint']]} vs "
                f"{[round(v) for v in rps['stock']]})",
                flush=True,
            )
            if "baseline" in rps:
                b, bc = statistics.median(rps["baseline"]), statistics.median(per_cpu["baseline"])
                print(
                    f"    count={count:<6d} baseline {b:8,.0f} req/s  baseline / stock = {b / s:.2f}  idmint / "
                    f"baseline = {i / b:.2f}; per server CPU-s {bc:,.0f}: baseline / stock = {bc / sc:.2f}, idmint / "
                    f"baseline = {ic / bc:.2f}  (all: {[round(v) for v in rps['baseline']]})",
                    flush=True,
                )
    finally:
        for proc, _ in servers.values():
            stop(proc)


def run_streams(
    args: argparse.Namespace,
    streamed: list[str],
    idm: subprocess.Popen[bytes],
    idm_url: str,
    bare_url: str,
    raw_url: str,
    baseline: tuple[subprocess.Popen[bytes], str] | None = None,
) -> None:
    """(b): rounds of (wiji, scheme, bare and raw ceilings at the scheme's line width) per scheme; medians printed.
    With ``baseline`` (the ``--baseline`` server), its wiji and scheme streams join each round, after this
    revision's."""
    count = args.count
    described = {s["name"]: s for s in httpx.get(idm_url + "/v1/schemes").json()["schemes"]}
    others = [name for name in streamed if name != "wiji"] or ["wiji"]
    rates: dict[str, list[float]] = {name: [] for name in others}
    ratios: dict[str, list[float]] = {name: [] for name in others}
    ceilings: dict[str, dict[str, list[float]]] = {
        "bare": {name: [] for name in others},
        "raw": {name: [] for name in others},
    }
    cpu: dict[str, list[float]] = {name: [] for name in ["wiji", *others]}
    waits: dict[str, list[float]] = {name: [] for name in ["wiji", *others]}
    widths: dict[str, float] = {"wiji": 27.0}
    peaks: dict[str, tuple[int, int]] = {}
    wiji_rates: list[float] = []
    cpu_ratios: dict[str, list[float]] = {name: [] for name in others}
    base_ratios: dict[str, list[float]] = {name: [] for name in others}
    base_cpu_ratios: dict[str, list[float]] = {name: [] for name in others}
    base_cpu: dict[str, list[float]] = {name: [] for name in ["wiji", *others]}
    print(
        f"(b) streams of {count:,} IDs, one worker, {args.stream_rounds} rounds; per scheme and round: wiji, the "
        f"scheme, then the bare ASGI app (bench/bare_app.py) and the raw server (bench/raw_server.py) streaming "
        f"lines of the scheme's width (the ceilings, no ID generated), all read by curl into /dev/null; load "
        f"average {os.getloadavg()[0]:.1f} at start",
        flush=True,
    )
    for _ in range(args.stream_rounds):
        for scheme in others:
            wiji_run = stream(idm_url, "wiji", count, idm.pid)
            run = stream(idm_url, scheme, count, idm.pid)
            wiji_seconds, seconds, size = wiji_run.seconds, run.seconds, run.size
            before, peak = run.rss_before_kib, run.rss_peak_kib
            for name, got in (("wiji", wiji_run), (scheme, run)):
                cpu[name].append(got.cpu_s)
                waits[name].append(got.wait_s / got.seconds)
            widths["wiji"] = wiji_run.size / count
            wiji_rates.append(count / wiji_seconds)
            rates[scheme].append(count / seconds)
            ratios[scheme].append(wiji_seconds / seconds)
            cpu_ratios[scheme].append(wiji_run.cpu_s / run.cpu_s)
            if baseline is not None:
                base_proc, base_url = baseline
                base_wiji = stream(base_url, "wiji", count, base_proc.pid)
                base_run = stream(base_url, scheme, count, base_proc.pid)
                base_cpu["wiji"].append(base_wiji.cpu_s)
                base_cpu[scheme].append(base_run.cpu_s)
                base_ratios[scheme].append(base_wiji.seconds / base_run.seconds)
                base_cpu_ratios[scheme].append(base_wiji.cpu_s / base_run.cpu_s)
            widths[scheme] = size / count
            peaks[scheme] = (before, max(peak, peaks.get(scheme, (0, 0))[1]))
            if scheme not in CAPPED:
                for kind, base in (("bare", bare_url), ("raw", raw_url)):
                    ceiling_seconds, _ = curl_to_null(f"{base}/stream?count={count}&width={round(size / count)}")
                    ceilings[kind][scheme].append(count / ceiling_seconds)
    w = statistics.median(wiji_rates)
    print(
        "    M IDs/s (median, best of the rounds); x wiji, x bare, x raw: median of the per-round ratios to wiji and "
        "to the two ceilings at the scheme's line width; MB/s: the median rate times the line (10^6 bytes); per "
        "CPU-s: IDs per second the server spent on a CPU (all threads, /proc schedstat), a figure the neighbours "
        "disturb less; cpu x wiji: median of the per-round ratios of wiji's server CPU per ID to the scheme's; cpu "
        "wait: share of the stream's wall time the server was runnable but had no CPU"
        + (
            "; then the --baseline revision's x wiji, cpu x wiji and per CPU-s, from its streams in the same rounds"
            if baseline is not None
            else ""
        )
    )
    print(
        f"    {'scheme':10s} {'median':>7s} {'best':>7s} {'x wiji':>6s} {'MB/s':>6s} {'x bare':>6s} "
        f"{'bare MB/s':>9s} {'x raw':>5s} {'raw MB/s':>8s} {'per CPU-s':>9s} {'cpu x wiji':>10s} {'cpu wait':>8s}"
        "  line  target"
    )
    print(
        f"    {'wiji':10s} {w / 1e6:7.2f} {max(wiji_rates) / 1e6:7.2f} {1:6.2f} {w * widths['wiji'] / 1e6:6.0f} "
        f"{'':6s} {'':9s} {'':5s} {'':8s} {count / statistics.median(cpu['wiji']) / 1e6:9.2f} {1:10.2f} "
        f"{statistics.median(waits['wiji']):8.0%}  {widths['wiji']:4.1f} B  ({len(wiji_rates)} streams)"
        + (f"  baseline per CPU-s {count / statistics.median(base_cpu['wiji']) / 1e6:.2f}" if baseline else "")
    )
    for scheme in others:
        rate = statistics.median(rates[scheme])
        width = widths[scheme]
        columns = ""
        for kind, ratio_width, mb_width in (("bare", 6, 9), ("raw", 5, 8)):
            got = ceilings[kind][scheme]
            if not got:
                columns += " " * (ratio_width + mb_width + 2)
                continue
            per = statistics.median(r / c for r, c in zip(rates[scheme], got))
            columns += f" {per:{ratio_width}.2f} {statistics.median(got) * width / 1e6:{mb_width}.0f}"
        line = (
            f"    {scheme:10s} {rate / 1e6:7.2f} {max(rates[scheme]) / 1e6:7.2f} "
            f"{statistics.median(ratios[scheme]):6.2f} {rate * width / 1e6:6.0f}{columns} "
            f"{count / statistics.median(cpu[scheme]) / 1e6:9.2f} {statistics.median(cpu_ratios[scheme]):10.2f} "
            f"{statistics.median(waits[scheme]):8.0%}  {width:4.1f} B"
        )
        target = TARGETS.get(scheme)
        if scheme == "snowflake":
            cap = described["snowflake"].get("limits", {}).get("ids_per_second")
            if cap:
                line += (
                    f"  {rate / cap:.1%} of its cap ({cap:,} IDs/s, {args.snowflake_workers} worker ID(s)); "
                    f"target 95%: {'met' if rate >= 0.95 * cap else 'MISSED'}"
                )
        elif scheme == "eight-byte":
            cap = 64_000 * args.eight_byte_generators
            line += f"  {rate / cap:.1%} of the format cap for {args.eight_byte_generators} generator IDs"
        elif target:
            line += f"  {target / 1e6:.0f} M: {'met' if rate >= target else 'MISSED'}"
        before, peak = peaks[scheme]
        if baseline is not None:
            line += (
                f"  [baseline: x wiji {statistics.median(base_ratios[scheme]):.2f}, cpu x wiji "
                f"{statistics.median(base_cpu_ratios[scheme]):.2f}, per CPU-s "
                f"{count / statistics.median(base_cpu[scheme]) / 1e6:.2f}]"
            )
        print(line + f"  (rss {before / 1024:.0f} -> peak {peak / 1024:.0f} MiB)", flush=True)


if __name__ == "__main__":
    main()
