"""Benchmark ``format=public`` against the plain form, in one run, and print the figures.

(a) over real HTTP: one ``idmint serve`` (one worker, a public-ID key file) loaded by ``--clients`` processes, each
    with one keep-alive connection sending requests back to back (http.client: the machine may have no wrk), in
    rounds alternating the plain and the public form of ``GET /v1/ids/{scheme}`` for single IDs and for
    ``count=1000``; printed: the median requests/s of each and the ratio public / plain.
(b) in-process: the encoding alone (the answer's text of already-issued IDs), µs per answer of 1 and 1,000 IDs,
    plain and public, per scheme.

Usage: python bench/bench_public.py [--seconds 3] [--rounds 3] [--clients 2] [--schemes snowflake,uuidv7,...]
Nothing here asserts: it prints (with /proc/loadavg: on a shared machine the rates move with the load).
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.server import running_server  # noqa: E402

SECRET = "5c" * 32


def _client(port: int, path: str, seconds: float, out: multiprocessing.Queue[int]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    done = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            raise SystemExit(f"{path}: {r.status}")
        done += 1
    out.put(done)


def rate(port: int, path: str, seconds: float, clients: int) -> float:
    q: multiprocessing.Queue[int] = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_client, args=(port, path, seconds, q)) for _ in range(clients)]
    for p in procs:
        p.start()
    total = sum(q.get() for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def http_figures(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="bench-public-"))
    keys = workdir / "keys.toml"
    keys.write_text(f'[[key]]\nid = 1\nsecret = "{SECRET}"\n')
    with running_server(workdir, {"IDMINT_PUBLIC_ID_KEYS_FILE": str(keys)}) as server:
        print(f"(a) HTTP, one idmint serve worker, {args.clients} client processes, {args.seconds} s a round")
        print(
            f"{'scheme':<11} {'count':>5} {'plain req/s':>12} {'public req/s':>13} {'ratio':>6}  rounds (plain/public)"
        )
        for scheme in args.schemes:
            for count in (1, 1000):
                base = f"/v1/ids/{scheme}?count={count}"
                plain, public = [], []
                for _ in range(args.rounds):
                    plain.append(rate(server.port, base, args.seconds, args.clients))
                    public.append(rate(server.port, base + "&format=public", args.seconds, args.clients))
                p, q = statistics.median(plain), statistics.median(public)
                rounds = " ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(plain, public, strict=True))
                print(f"{scheme:<11} {count:>5} {p:>12.0f} {q:>13.0f} {q / p:>6.2f}  {rounds}")


def encode_figures(args: argparse.Namespace) -> None:
    from app.public.forms import Public
    from app.public.keys import PublicKeys
    from app.schemes import schemes
    from app.settings import Settings

    workdir = Path(tempfile.mkdtemp(prefix="bench-public-"))
    keys = workdir / "keys.toml"
    keys.write_text(f'[[key]]\nid = 1\nsecret = "{SECRET}"\n')
    settings = Settings(state_dir=workdir)
    registry = {name: s.configured(settings) for name, s in schemes().items()}
    public = Public(PublicKeys(keys), registry)
    ring = public.ring()
    print("(b) encoding alone, µs per answer (median of 7 runs)")
    print(f"{'scheme':<11} {'count':>5} {'plain':>9} {'public':>9}")
    for name in args.schemes:
        scheme = registry[name]
        gen = scheme.new_generator(settings, [1] if scheme.identity_pool(settings) else [], -1, time.time_ns)
        for count in (1, 1000):
            batch = gen.generate(count)
            while batch.count < count:
                time.sleep(0.002)
                batch = gen.generate(count)
            fmt = scheme.formats[0]

            def med(fn: object) -> float:
                runs = []
                for _ in range(7):
                    t = time.perf_counter()
                    for _ in range(20):
                        fn()  # type: ignore[operator]
                    runs.append((time.perf_counter() - t) / 20 * 1e6)
                return statistics.median(runs)

            plain = med(lambda b=batch, f=fmt: b.encode(f))
            masked = med(lambda b=batch, s=scheme: public.lines(ring, s, b.values(), b))
            print(f"{name:<11} {count:>5} {plain:>9.1f} {masked:>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--schemes", type=lambda s: s.split(","), default="snowflake,eight-byte,uuidv7,ulid,typeid")
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    print("load average before:", Path("/proc/loadavg").read_text().strip())
    encode_figures(args)
    if not args.skip_http:
        http_figures(args)
    print("load average after:", Path("/proc/loadavg").read_text().strip())


if __name__ == "__main__":
    main()
