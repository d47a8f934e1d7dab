"""Count the CPU instructions each request costs a real uvicorn server, with callgrind, and print the ratios.

On this shared two-core machine wall-clock rounds of ``bench_http.py`` vary by up to +-25% (the neighbours), so a
10% change in our own code does not show there. Instructions do not depend on the neighbours: callgrind counts the
same total for the same work whatever else runs. They are not time (cache misses and instruction-level parallelism
differ between apps: uuid-utils' Rust does more per instruction than Python), so read them beside bench_http.py's
figures, not instead of them.

How: each app is served by uvicorn with the flags of bench_http.py (one worker, uvloop) under
``valgrind --tool=callgrind``. After ``--warm`` requests, the counters are zeroed (``callgrind_control -z``),
``--requests`` requests are sent on 8 connections, and the counters are dumped (``callgrind_control -d``): the
dump's total over the requests is the instructions per request, for every thread of the server (the encode pool
included). ``--client``:

* ``keepalive`` (default): HTTP/1.1 requests on 8 kept-alive connections, one at a time each (what wrk sends, and
  the goals are stated for);
* ``ab``: ``ab -k -c 8``, the first method. ab speaks HTTP/1.0, and uvicorn keeps no HTTP/1.0
  connection alive: each request is a new connection, so its accept, set-up and close are counted too.

``--http``: the protocol idmint's rows are served with: ``idmint`` (default: ``app.serving``'s, what ``idmint
serve`` runs, which answers the hot routes itself) or ``httptools`` (uvicorn's own; every request through ASGI).
The bare and stock apps are always served by uvicorn's own httptools protocol.

Rows (each its own server):
* bare: the bare ASGI app (bench/bare_app.py), the floor of any Python ASGI app on this server;
* raw: bench/raw_server.py (uvloop + httptools, no ASGI, a fixed answer in one write), the ceiling of a Python
  server here: raw / idmint is the single-ID goal's ratio by instructions (target a third);
* idmint ``GET /v1/ids/{scheme}`` for each of ``--schemes`` (default wiji), beside bare: bare / idmint is the goal's
  single-ID ratio (target 0.8 by instructions);
* with ``--keys``: idmint with an API key file (one key, scope issue, no quotas), each request carrying the key;
* with ``--baseline DIR`` (a checkout of another revision), that revision's idmint for the same schemes (with the
  same ``--http``: ``app.serving``'s protocol of that revision);
* unless ``--skip-stock``: ``GET /v1/ids/uuidv7?count=C`` for each of ``--stock-counts`` (default 1 and 1000) from
  idmint and from bench/stock_app.py (stock FastAPI + uuid-utils): stock / idmint (goals: 3x and 5x by
  requests/s). ``count=1000`` rows send ``--requests / 10`` requests.

Under valgrind a server runs about 50 times slower: each row takes one to three minutes. Periodic work (lease
keepalives, mark writes) therefore weighs about 50 times more per request than at full speed, and more again when
the machine is busy: the raw figures are pessimistic and move with the load (idmint wiji 120,577 raw at load 4,
136,746 at load 16), the net ones much less.

Usage: python bench/bench_instructions.py [--schemes wiji,uuidv7] [--requests 5000] [--warm 1000]
                                          [--client keepalive|ab] [--http idmint|httptools] [--keys]
                                          [--baseline DIR] [--skip-stock] [--stock-counts 1,1000]
Needs: valgrind (apt-get install valgrind; apache2-utils for --client ab). Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_http import IDMINT_PROTOCOL, free_port, uvicorn_command  # noqa: E402

IDLE_S = 10.0
"""Seconds each server idles under callgrind, to count the rate of its own background work."""


class Counted(NamedTuple):
    """Instructions per request: ``raw`` (everything the server ran while loaded, over the requests) and ``net``
    (less its background work at the rate counted while it idled): the figure the rows compare."""

    raw: int
    net: int

    def __str__(self) -> str:
        return f"{self.net:>10,} ({self.raw:,} raw)"


KEY = "bench-key"
"""The API key of ``--keys``' row."""
RAW = ["raw"]
"""The raw server's row: bench/raw_server.py (uvloop + httptools, a fixed answer in one write), not uvicorn."""
READY_TIMEOUT_S = 600.0
"""How long a server under valgrind may take to answer its first request (imports run about 50 times slower)."""


def instructions_per_request(
    target: list[str],
    cwd: Path,
    path: str,
    requests: int,
    warm: int,
    client: str,
    http: str = "httptools",
    key: str | None = None,
) -> Counted:
    """Serve ``target`` (uvicorn's app arguments, or ``RAW`` for bench/raw_server.py) from ``cwd`` with protocol
    ``http`` under callgrind and count ``path``'s requests, sent by ``client`` (``keepalive`` or ``ab``). With
    ``key``, the server has an API key file holding that key (scope issue, no quotas) and every request carries it."""
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="idmint-callgrind-"))
    state = work / "state"
    state.mkdir()
    headers = () if key is None else (f"Authorization: Bearer {key}",)
    if client == "keepalive":
        load = functools.partial(keepalive, headers=headers)
    else:
        load = functools.partial(ab, headers=headers)
    if target == RAW:
        command = [sys.executable, str(ROOT / "bench" / "raw_server.py"), str(port)]
    else:
        command = uvicorn_command(target, port, http)
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/cg.%p", *command]
    env = {**os.environ, "PYTHONPATH": str(cwd), "IDMINT_STATE_DIR": str(state)}
    if key is not None:
        keys = work / "keys.toml"
        digest = hashlib.sha256(key.encode()).hexdigest()
        keys.write_text(f'[[key]]\nname = "bench"\nsha256 = "{digest}"\nscopes = ["issue"]\n')
        env["IDMINT_API_KEYS_FILE"] = str(keys)
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}{path}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                if httpx.get(url, timeout=30, headers=[h.split(": ", 1) for h in headers]).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (work / "server.log").read_text(errors="replace")[-2000:]
                raise SystemExit(f"{target} did not answer {path}; its log ends:\n{tail}")
            time.sleep(1)
        load(url, warm)
        # The server's own background work (marks written ahead of the clock, lease keepalives, the claim ledger)
        # runs by wall time, and under valgrind a busy machine stretches the wall time of the same requests: its
        # rate is counted while the server idles, and taken off the count under load.
        zero(proc.pid)
        started = time.monotonic()
        time.sleep(IDLE_S)
        idle_per_s = dumped_total(proc.pid, work) / (time.monotonic() - started)
        zero(proc.pid)
        started = time.monotonic()
        load(url, requests)
        loaded = time.monotonic() - started
        total = dumped_total(proc.pid, work)
        return Counted(total // requests, max(0, round(total - idle_per_s * loaded)) // requests)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def zero(pid: int) -> None:
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)


def dumped_total(pid: int, work: Path) -> int:
    """Dump callgrind's counters of server ``pid`` (into ``work``) and return their total of instructions."""
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    dumps = sorted(work.glob(f"cg.{pid}.*"), key=lambda p: p.stat().st_mtime)
    if not dumps:
        raise SystemExit(f"callgrind wrote no dump for {pid}")
    match = re.search(r"^(?:summary|totals):\s+(\d+)", dumps[-1].read_text(errors="replace"), re.MULTILINE)
    if not match:
        raise SystemExit(f"no total in {dumps[-1]}")
    return int(match.group(1))


def ab(url: str, requests: int, headers: tuple[str, ...] = ()) -> None:
    """``requests`` keep-alive requests on 8 connections; exits unless every one answered 2xx."""
    extra = [arg for header in headers for arg in ("-H", header)]
    out = subprocess.run(
        ["ab", "-k", "-c", "8", "-n", str(requests), *extra, url], capture_output=True, text=True, check=True
    ).stdout
    done = re.search(r"Complete requests:\s+(\d+)", out)
    non_2xx = re.search(r"Non-2xx responses:\s+(\d+)", out)
    if not done or int(done.group(1)) != requests or non_2xx:
        raise SystemExit(f"ab output not understood or errors seen:\n{out}")


def keepalive(url: str, requests: int, connections: int = 8, headers: tuple[str, ...] = ()) -> None:
    """``requests`` HTTP/1.1 GETs of ``url`` (with ``headers``) on ``connections`` kept-alive connections, each
    waiting for its answer before the next (wrk's pattern); exits unless every one answered 200."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    extra = "".join(f"{header}\r\n" for header in headers)
    request = f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\n{extra}\r\n".encode()
    shares = [requests // connections + (i < requests % connections) for i in range(connections)]
    failures: list[str] = []

    def run(count: int) -> None:
        with socket.create_connection((parts.hostname, parts.port), timeout=600) as sock:
            buffer = b""
            for _ in range(count):
                sock.sendall(request)
                while b"\r\n\r\n" not in buffer:
                    buffer += sock.recv(65536)
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
                while len(buffer) < length:
                    buffer += sock.recv(65536)
                buffer = buffer[length:]
                if not head.startswith(b"HTTP/1.1 200 "):
                    failures.append(head.split(b"\r\n")[0].decode())
                    return

    threads = [threading.Thread(target=run, args=(n,)) for n in shares if n]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit(f"answers other than 200: {failures[:3]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schemes", default="wiji", help="idmint schemes for the single-ID rows (comma list)")
    ap.add_argument("--requests", type=int, default=5000, help="requests counted per row (default 5,000)")
    ap.add_argument("--warm", type=int, default=1000, help="requests before the counters are zeroed")
    ap.add_argument("--client", choices=("keepalive", "ab"), default="keepalive", help="how requests are sent")
    ap.add_argument(
        "--http", choices=("idmint", "httptools"), default="idmint", help="the protocol idmint's rows are served by"
    )
    ap.add_argument("--baseline", type=Path, help="a checkout of another idmint revision, counted beside this one")
    ap.add_argument("--skip-stock", action="store_true", help="skip the stock FastAPI + uuid-utils rows")
    ap.add_argument("--keys", action="store_true", help="also idmint with an API key file, each request keyed")
    ap.add_argument("--stock-counts", default="1,1000", help="count= values for the stock rows (default 1,1000)")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_control", *(["ab"] if args.client == "ab" else [])):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is needed: apt-get install valgrind apache2-utils")

    idmint = ["--factory", "app.main:create_app"]
    http = IDMINT_PROTOCOL if args.http == "idmint" else "httptools"
    sent = "HTTP/1.1 on 8 kept-alive connections" if args.client == "keepalive" else "ab -k -c 8, HTTP/1.0"
    print(f"instructions per request, callgrind, {args.requests} requests ({sent}) after {args.warm}; idmint: {http}")
    bare = instructions_per_request(["bare_app:app"], ROOT / "bench", "/", args.requests, args.warm, args.client)
    print(f"    bare ASGI app                     {bare}", flush=True)
    raw = instructions_per_request(RAW, ROOT / "bench", "/", args.requests, args.warm, args.client)
    print(f"    raw server                        {raw}   raw / bare = {raw.net / bare.net:.3f}", flush=True)
    for scheme in args.schemes.split(","):
        path = f"/v1/ids/{scheme}"
        ours = instructions_per_request(idmint, ROOT, path, args.requests, args.warm, args.client, http)
        line = (
            f"    idmint GET /v1/ids/{scheme:<14} {ours}   bare / idmint = {bare.net / ours.net:.3f}, "
            f"raw / idmint = {raw.net / ours.net:.3f}"
        )
        if args.baseline is not None:
            base = instructions_per_request(idmint, args.baseline, path, args.requests, args.warm, args.client, http)
            line += (
                f";  baseline {base} (bare / baseline {bare.net / base.net:.3f}), this / baseline = "
                f"{ours.net / base.net:.3f}"
            )
        print(line, flush=True)
        if args.keys:
            keyed = instructions_per_request(idmint, ROOT, path, args.requests, args.warm, args.client, http, KEY)
            print(
                f"    idmint + API keys {scheme:<16} {keyed}   bare / idmint = {bare.net / keyed.net:.3f}, "
                f"raw / idmint = {raw.net / keyed.net:.3f}",
                flush=True,
            )
    if not args.skip_stock:
        for count in (int(c) for c in args.stock_counts.split(",")):
            n = args.requests if count < 100 else max(100, args.requests // 10)
            path = f"/v1/ids/uuidv7?count={count}"
            warm = max(100, args.warm * n // args.requests)
            ours = instructions_per_request(idmint, ROOT, path, n, warm, args.client, http)
            stock = instructions_per_request(["bench.stock_app:app"], ROOT, path, n, warm, args.client)
            print(
                f"    GET {path:<28} idmint {ours}  stock {stock}   stock / idmint = {stock.net / ours.net:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
