"""Count the CPU instructions each request costs a real uvicorn server, with callgrind, and print the ratios.

On this shared two-core machine wall-clock rounds of ``bench_http.py`` vary by up to +-25% (the neighbours), so a
10% change in our own code does not show there. Instructions do not depend on the neighbours: callgrind counts the
same total for the same work whatever else runs. They are not time (cache misses and instruction-level parallelism
differ between apps: uuid-utils' Rust does more per instruction than Python), so read them beside bench_http.py's
figures, not instead of them.

How: each app is served by uvicorn with the flags of bench_http.py (one worker, uvloop, httptools) under
``valgrind --tool=callgrind``. After ``--warm`` requests, the counters are zeroed (``callgrind_control -z``),
``ab -k -c 8 -n N`` sends ``--requests`` keep-alive requests, and the counters are dumped (``callgrind_control -d``):
the dump's total over N is the instructions per request, for every thread of the server (the encode pool included).

Rows (each its own server):
* bare: the bare ASGI app (bench/bare_app.py), the floor of any Python ASGI app on this server;
* idmint ``GET /v1/ids/{scheme}`` for each of ``--schemes`` (default wiji), beside bare: bare / idmint is issue 22's
  single-ID ratio (target 0.7) by instructions;
* with ``--baseline DIR`` (a checkout of another revision), that revision's idmint for the same schemes;
* unless ``--skip-stock``: ``GET /v1/ids/uuidv7?count=C`` for each of ``--stock-counts`` (default 1 and 1000) from
  idmint and from bench/stock_app.py (stock FastAPI + uuid-utils): stock / idmint (issue 22: 3x and 5x by
  requests/s). ``count=1000`` rows send ``--requests / 10`` requests.

Under valgrind a server runs about 50 times slower: each row takes one to three minutes. Periodic work (lease
keepalives, mark writes) therefore weighs about 50 times more per request than at full speed, which makes idmint's
figures slightly pessimistic.

Usage: python bench/bench_instructions.py [--schemes wiji,uuidv7] [--requests 5000] [--warm 1000]
                                          [--baseline DIR] [--skip-stock] [--stock-counts 1,1000]
Needs: valgrind and ab (apt-get install valgrind apache2-utils). Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_http import free_port, uvicorn_command  # noqa: E402

READY_TIMEOUT_S = 600.0
"""How long a server under valgrind may take to answer its first request (imports run about 50 times slower)."""


def instructions_per_request(target: list[str], cwd: Path, path: str, requests: int, warm: int) -> int:
    """Serve ``target`` (uvicorn's app arguments) from ``cwd`` under callgrind and count ``path``'s requests."""
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="idmint-callgrind-"))
    state = work / "state"
    state.mkdir()
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/cg.%p", *uvicorn_command(target, port)]
    env = {**os.environ, "PYTHONPATH": str(cwd), "IDMINT_STATE_DIR": str(state)}
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}{path}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                if httpx.get(url, timeout=30).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (work / "server.log").read_text(errors="replace")[-2000:]
                raise SystemExit(f"{target} did not answer {path}; its log ends:\n{tail}")
            time.sleep(1)
        ab(url, warm)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
        ab(url, requests)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
        dumps = sorted(work.glob(f"cg.{proc.pid}.*"), key=lambda p: p.stat().st_mtime)
        if not dumps:
            raise SystemExit(f"callgrind wrote no dump for {target}")
        match = re.search(r"^(?:summary|totals):\s+(\d+)", dumps[-1].read_text(errors="replace"), re.MULTILINE)
        if not match:
            raise SystemExit(f"no total in {dumps[-1]}")
        return int(match.group(1)) // requests
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def ab(url: str, requests: int) -> None:
    """``requests`` keep-alive requests on 8 connections; exits unless every one answered 2xx."""
    out = subprocess.run(
        ["ab", "-k", "-c", "8", "-n", str(requests), url], capture_output=True, text=True, check=True
    ).stdout
    done = re.search(r"Complete requests:\s+(\d+)", out)
    non_2xx = re.search(r"Non-2xx responses:\s+(\d+)", out)
    if not done or int(done.group(1)) != requests or non_2xx:
        raise SystemExit(f"ab output not understood or errors seen:\n{out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schemes", default="wiji", help="idmint schemes for the single-ID rows (comma list)")
    ap.add_argument("--requests", type=int, default=5000, help="requests counted per row (default 5,000)")
    ap.add_argument("--warm", type=int, default=1000, help="requests before the counters are zeroed")
    ap.add_argument("--baseline", type=Path, help="a checkout of another idmint revision, counted beside this one")
    ap.add_argument("--skip-stock", action="store_true", help="skip the stock FastAPI + uuid-utils rows")
    ap.add_argument("--stock-counts", default="1,1000", help="count= values for the stock rows (default 1,1000)")
    args = ap.parse_args()
    for tool in ("valgrind", "callgrind_control", "ab"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is needed: apt-get install valgrind apache2-utils")

    idmint = ["--factory", "app.main:create_app"]
    print(f"instructions per request, callgrind, {args.requests} keep-alive requests (ab -k -c 8) after {args.warm}")
    bare = instructions_per_request(["bare_app:app"], ROOT / "bench", "/", args.requests, args.warm)
    print(f"    bare ASGI app                     {bare:>12,}")
    for scheme in args.schemes.split(","):
        ours = instructions_per_request(idmint, ROOT, f"/v1/ids/{scheme}", args.requests, args.warm)
        line = f"    idmint GET /v1/ids/{scheme:<14} {ours:>12,}   bare / idmint = {bare / ours:.3f}"
        if args.baseline is not None:
            base = instructions_per_request(idmint, args.baseline, f"/v1/ids/{scheme}", args.requests, args.warm)
            line += f";  baseline {base:,}, this revision / baseline = {ours / base:.3f}"
        print(line)
    if not args.skip_stock:
        for count in (int(c) for c in args.stock_counts.split(",")):
            n = args.requests if count < 100 else max(100, args.requests // 10)
            path = f"/v1/ids/uuidv7?count={count}"
            ours = instructions_per_request(idmint, ROOT, path, n, max(100, args.warm * n // args.requests))
            stock = instructions_per_request(
                ["bench.stock_app:app"], ROOT, path, n, max(100, args.warm * n // args.requests)
            )
            print(f"    GET {path:<28} idmint {ours:>12,}  stock {stock:>12,}   stock / idmint = {stock / ours:.2f}")


if __name__ == "__main__":
    main()
