"""Benchmark the three idmint clients side by side and print the figures.

Against one ``idmint serve`` worker on loopback (started here, own state dir), in one run, the clients alternated
(Python, TypeScript, Go; the order rotates each round), each in its own process:

(a) ``buffered``: new IDs per second from a warm buffer, in process (Python ``Client.new_id``, TypeScript
    ``client.newId`` awaited one at a time, Go ``client.NewID``), refills included;
(b) ``hot``: new IDs per second from a full buffer, in process: bursts of 40,000 draws, each from a new client
    whose first draw fetched 100,000 IDs (no max age); only the draws are timed (what the hot path costs, apart
    from how fast the server streams refills);
(c) ``single``: single calls per second, the buffer off (one request per ID, one at a time).

Each measurement runs ``--seconds`` after a 1 s warm-up; prints every run, then per client and mode the median over
the rounds and its ratio to the Python client's. Goals: TypeScript >= 1 M/s and Go >= 5 M/s buffered
new IDs in process.

``--against DIR``: also run the clients of another tree (``git archive main clients | tar -x -C DIR``; its
``clients/typescript/node_modules`` may be a link to this tree's), alternated with this tree's in the same run and
against the same server, labelled ``python@DIR`` and so on: the cost of a change to the clients, side by side.
``--modes``: the modes to run (comma-separated). The load average is printed at the start and the end.

Usage: python bench/bench_clients.py [--seconds 5] [--rounds 3] [--scheme wiji] [--against DIR] [--modes hot]
Needs: the Python client (pip install -e clients/python), node (the TypeScript client is built here with
``npm run build``; run ``npm ci`` in clients/typescript once) and go. Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_client import start_server  # noqa: E402

BLOCK = 1000
MODES = ("buffered", "hot", "single")
HOT_BURST = 40_000
HOT_REFILL = 100_000
HOT_TIMED_SHARE = 5
"""A hot run times draws for --seconds / HOT_TIMED_SHARE (its refills, untimed, take most of its wall time)."""
GO_BENCH = Path(tempfile.gettempdir()) / f"idmint-bench-go-{os.getuid()}"


def python_worker(url: str, scheme: str, mode: str, seconds: float) -> None:
    """The Python client's measurement (run in a subprocess, as the other clients are)."""
    from idmint_client import Client

    if mode == "hot":
        timed, count = 0.0, 0
        while timed < seconds:
            with Client(url, max_age=None, min_refill=HOT_REFILL, max_refill=HOT_REFILL) as fresh:
                draw = fresh.new_id
                draw(scheme)
                started = time.perf_counter()
                for _ in range(HOT_BURST):
                    draw(scheme)
                timed += time.perf_counter() - started
                count += HOT_BURST
        print(json.dumps({"client": "python", "mode": mode, "ids": count, "seconds": timed, "rate": count / timed}))
        return
    step = 10 if mode == "single" else BLOCK
    with Client(url, buffer=mode != "single") as client:
        new_id = client.new_id
        warm = time.monotonic() + 1.0
        while time.monotonic() < warm:
            for _ in range(step):
                new_id(scheme)
        count = 0
        started = time.monotonic()
        end = started + seconds
        while time.monotonic() < end:
            for _ in range(step):
                new_id(scheme)
            count += step
        elapsed = time.monotonic() - started
    print(json.dumps({"client": "python", "mode": mode, "ids": count, "seconds": elapsed, "rate": count / elapsed}))


def commands(url: str, scheme: str, mode: str, seconds: float, tree: Path = ROOT) -> dict[str, list[str]]:
    go = go_binary(tree)
    return {
        "python": [sys.executable, __file__, "--python-worker", url, scheme, mode, str(seconds)],
        "typescript": ["node", str(tree / "clients/typescript/build/bench/bench.js"), url, scheme, mode, str(seconds)],
        "go": [str(go), "-url", url, "-scheme", scheme, "-mode", mode, "-seconds", str(seconds)],
    }


def go_binary(tree: Path) -> Path:
    return GO_BENCH if tree == ROOT else GO_BENCH.with_name(f"{GO_BENCH.name}-{abs(hash(str(tree)))}")


def build(tree: Path = ROOT) -> None:
    subprocess.run(["npm", "run", "--silent", "build"], cwd=tree / "clients/typescript", check=True)
    subprocess.run(
        ["go", "build", "-o", str(go_binary(tree)), "./cmd/idmint-bench"], cwd=tree / "clients/go", check=True
    )


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else "unknown"


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--python-worker":
        python_worker(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scheme", default="wiji")
    parser.add_argument("--against", type=Path, default=None)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m in MODES]
    trees = {"": ROOT}
    if args.against is not None:
        trees[f"@{args.against.name}"] = args.against.resolve()
    for tree in trees.values():
        build(tree)
    clients = [f"{c}{label}" for c in ("python", "typescript", "go") for label in trees]
    rates: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as state_dir:
        proc, url = start_server(state_dir)
        try:
            print(f"server: {url} (idmint serve, 1 worker); scheme {args.scheme}; {args.seconds:g} s per run")
            print(f"load average at start: {loadavg()}")
            for round_number in range(args.rounds):
                turn = round_number % len(clients)
                order = clients[turn:] + clients[:turn]
                for mode in modes:
                    for client in order:
                        seconds = args.seconds / HOT_TIMED_SHARE if mode == "hot" else args.seconds
                        name, _, label = client.partition("@")
                        tree = trees[f"@{label}" if label else ""]
                        command = commands(url, args.scheme, mode, seconds, tree)[name]
                        env = {**os.environ, "PYTHONPATH": str(tree / "clients/python")}
                        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, env=env)
                        if done.returncode != 0:
                            raise SystemExit(f"{client} {mode} failed: {done.stderr.strip()}")
                        result = json.loads(done.stdout.strip().splitlines()[-1])
                        rates.setdefault((client, mode), []).append(result["rate"])
                        print(f"round {round_number + 1} {mode:8} {client:16} {result['rate']:>14,.0f} IDs/s")
        finally:
            proc.terminate()
            proc.wait()
    print(f"load average at end: {loadavg()}")
    print()
    print(f"{'mode':8} {'client':16} {'median IDs/s':>14} {'vs python':>10}")
    for mode in modes:
        base = statistics.median(rates[("python", mode)])
        for client in clients:
            median = statistics.median(rates[(client, mode)])
            print(f"{mode:8} {client:16} {median:>14,.0f} {median / base:>9.2f}x")


if __name__ == "__main__":
    main()
