"""In-process time of the connection layer's hot path: one real app (lifespan started, claims made) and
``app.serving``'s protocol on a transport that records its writes, fed whole requests one read each. No event loop
turn, socket or syscall is counted: only the Python (and C) work per request between ``data_received`` and
``transport.write``, which is what the wrk and callgrind figures of bench_http.py and bench_instructions.py share
with it. Load-independent enough to compare two revisions on a busy machine (best of ``--rounds``).

Rows: ``GET /v1/ids/wiji`` without and with an API key file (one key, scope issue, no quotas), ``?count=1000`` (wiji
and uuidv7), each ``--schemes``' plain GET and each ``--batch-schemes``' ``?count=1000``.

``--instructions``: instead of timing, each row runs in its own process under ``valgrind --tool=callgrind``
collecting only inside httptools' ``feed_data`` (the request's whole work, our callbacks included, and nothing of
the set-up or the event loop): instructions per request, the same on a busy machine as on a quiet one.

Usage: python bench/bench_hot_path.py [--requests 20000] [--rounds 5] [--schemes wiji,uuidv7] [--profile ROW]
                                      [--batch-schemes ulid,siq] [--instructions]
Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import logging
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from uvicorn.config import Config
from uvicorn.server import ServerState

from app.main import create_app
from app.serving import BoundedHttpToolsProtocol
from app.settings import Settings
from tests.support.raw_http import RecordingTransport

KEY = "bench-key"


def request(target: str, *headers: str) -> bytes:
    return ("\r\n".join([f"GET {target} HTTP/1.1", "Host: idmint.test", *headers]) + "\r\n\r\n").encode()


async def measure(settings: Settings, rows: list[tuple[str, bytes]], requests: int, rounds: int, profile: str | None):
    front = create_app(settings)
    out: dict[str, float] = {}
    async with front.app.router.lifespan_context(front.app):
        config = Config(front, log_config=None, server_header=False, access_log=False)
        config.load()
        protocol = BoundedHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
        transport = RecordingTransport(keep=1)
        protocol.connection_made(transport)  # type: ignore[arg-type]
        feed = protocol.data_received
        for name, data in rows:
            feed(data)
            assert transport.writes[-1].startswith(b"HTTP/1.1 200 OK"), transport.writes[-1][:300]
            n = requests // 10 if b"count=1000" in data else requests
            best = float("inf")
            for _ in range(rounds):
                start = time.perf_counter()
                for _ in range(n):
                    feed(data)
                best = min(best, (time.perf_counter() - start) / n)
                await asyncio.sleep(0)
            out[name] = best
            if profile == name:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(n):
                    feed(data)
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(40)
        protocol.connection_lost(None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--schemes", default="")
    ap.add_argument("--batch-schemes", default="", help="schemes whose ?count=1000 gets a row too")
    ap.add_argument("--profile", help="cProfile one row (its name as printed)")
    ap.add_argument("--instructions", action="store_true", help="count instructions per request (callgrind)")
    ap.add_argument("--only", help=argparse.SUPPRESS)  # one row, in the process callgrind runs
    args = ap.parse_args()
    if args.instructions:
        count_instructions(args)
        return
    logging.getLogger("uvicorn.access").propagate = False
    rows = [("wiji", request("/v1/ids/wiji")), ("wiji count=1000", request("/v1/ids/wiji?count=1000"))]
    rows.append(("uuidv7 count=1000", request("/v1/ids/uuidv7?count=1000")))
    rows += [(s, request(f"/v1/ids/{s}")) for s in args.schemes.split(",") if s]
    rows += [(f"{s} count=1000", request(f"/v1/ids/{s}?count=1000")) for s in args.batch_schemes.split(",") if s]
    keyed = [("wiji + key", request("/v1/ids/wiji", f"Authorization: Bearer {KEY}"))]
    if args.only is not None:
        rows = [row for row in rows if row[0] == args.only]
        keyed = [row for row in keyed if row[0] == args.only]
    with tempfile.TemporaryDirectory() as tmp:
        plain = (
            {}
            if not rows
            else asyncio.run(
                measure(Settings(state_dir=Path(tmp) / "a"), rows, args.requests, args.rounds, args.profile)
            )
        )
        keys = Path(tmp) / "keys.toml"
        digest = hashlib.sha256(KEY.encode()).hexdigest()
        keys.write_text(f'[[key]]\nname = "bench"\nsha256 = "{digest}"\nscopes = ["issue"]\n')
        settings = Settings(state_dir=Path(tmp) / "b", api_keys_file=keys)
        with_keys = {} if not keyed else asyncio.run(measure(settings, keyed, args.requests, args.rounds, args.profile))
    for name, seconds in {**plain, **with_keys}.items():
        print(f"{name:<24} {seconds * 1e6:8.2f} us/request  {1 / seconds:>10,.0f} req/s (one core, in process)")


def count_instructions(args: argparse.Namespace) -> None:
    names = ["wiji", "wiji + key", "wiji count=1000", "uuidv7 count=1000"] + [s for s in args.schemes.split(",") if s]
    names += [f"{s} count=1000" for s in args.batch_schemes.split(",") if s]
    for name in names:
        requests = args.requests // 10 if "count=1000" in name else args.requests
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "callgrind.out"
            subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    "--collect-atstart=no",
                    "--toggle-collect=*feed_data*",
                    f"--callgrind-out-file={out}",
                    sys.executable,
                    __file__,
                    "--only",
                    name,
                    "--requests",
                    str(requests),
                    "--rounds",
                    "1",
                    "--schemes",
                    args.schemes,
                    "--batch-schemes",
                    args.batch_schemes,
                ],
                check=True,
                capture_output=True,
            )
            total = next(int(line.split()[1]) for line in out.read_text().splitlines() if line.startswith("summary:"))
        # the row's first request (the check before timing) and the timed ones
        print(f"{name:<24} {total / (requests + 1):>10,.0f} instructions/request")


if __name__ == "__main__":
    main()
