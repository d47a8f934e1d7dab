"""In-process time of the connection layer's hot path: one real app (lifespan started, claims made) and
``app.serving``'s protocol on a transport that records its writes, fed whole requests one read each. No event loop
turn, socket or syscall is counted: only the Python (and C) work per request between ``data_received`` and
``transport.write``, which is what the wrk and callgrind figures of bench_http.py and bench_instructions.py share
with it. Load-independent enough to compare two revisions on a busy machine (best of ``--rounds``).

Rows: ``GET /v1/ids/wiji`` without and with an API key file (one key, scope issue, no quotas), ``?count=1000`` (wiji
and uuidv7), each ``--schemes``' plain GET and each ``--batch-schemes``' ``?count=1000``.

Requests are fed from event-loop callbacks, each once the previous one is answered: an answer that finishes in a
task (a batch passing the recorded high-water mark records it first) is waited for, and counted.

``--instructions``: instead of timing, each row runs in its own process under ``valgrind --tool=callgrind``
collecting only inside httptools' ``feed_data`` (the request's work, our callbacks included) and the tasks' steps
(``task_step``: an answer finished in a task; also any background task that runs meanwhile), the least of three
rounds with the counters zeroed before and dumped after each (nothing of the set-up), nothing of the event loop's
own turns: instructions per request, the same on a busy machine as on a quiet one.
``--only-rows`` limits the rows counted (comma-separated names as printed).

Usage: python bench/bench_hot_path.py [--requests 20000] [--rounds 5] [--schemes wiji,uuidv7] [--profile ROW]
                                      [--batch-schemes ulid,siq] [--instructions [--only-rows ROW,...]]
Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import json
import logging
import os
import pstats
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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


class CountingTransport(RecordingTransport):
    """Counts its writes: a request is answered when the count moves."""

    written = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += 1
        super().write(data)


def answers(feed: Callable[[bytes], None], data: bytes, transport: CountingTransport, n: int) -> asyncio.Future[None]:
    """Feed ``data`` ``n`` times, each once the previous one is answered, from callbacks of the event loop (not a
    task), so an answer that finishes in a task (one that records a high-water mark first) runs in the loop's
    ``task_step`` between two feeds, which ``--instructions`` counts beside ``feed_data``; done after the last
    answer."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    left = n

    def step() -> None:
        nonlocal left
        while left:
            before = transport.written
            feed(data)
            left -= 1
            if transport.written == before:  # answered in a task: feed again once it has written
                loop.call_soon(wait, before)
                return
        done.set_result(None)

    def wait(before: int) -> None:
        if transport.written == before:
            loop.call_soon(wait, before)
        else:
            step()

    loop.call_soon(step)
    return done


def dumped_instructions(out_file: str) -> int:
    """Dump this process's callgrind counters (``callgrind_control -d``) and return the total of the dump."""
    subprocess.run(["callgrind_control", "-d", str(os.getpid())], check=True, capture_output=True)
    dumps = sorted(Path(out_file).parent.glob(Path(out_file).name + ".*"), key=lambda p: int(p.suffix[1:]))
    match = re.search(r"^(?:summary|totals):\s+(\d+)", dumps[-1].read_text(errors="replace"), re.MULTILINE)
    assert match is not None, dumps[-1]
    return int(match.group(1))


async def count_answers(feed: Callable[[bytes], None], data: bytes, transport: CountingTransport, n: int, out: str):
    """Instructions per answer under callgrind: the least of three rounds (counters zeroed, ``n`` answers, dumped),
    over ``n``; the least, so a rare event in one round (a mark written, a garbage collection) does not count. The
    zero and dump requests' own few ten-thousand instructions are spread over the ``n`` answers."""
    figures = []
    for _ in range(3):
        # blocking on purpose: nothing else may run between the zero and the answers
        subprocess.run(["callgrind_control", "-z", str(os.getpid())], check=True, capture_output=True)  # noqa: ASYNC221
        await answers(feed, data, transport, n)
        figures.append(dumped_instructions(out))
    return min(figures) / n


async def measure(
    settings: Settings,
    rows: list[tuple[str, bytes]],
    requests: int,
    rounds: int,
    profile: str | None,
    inside: str | None = None,
):
    front = create_app(settings)
    out: dict[str, float] = {}
    async with front.app.router.lifespan_context(front.app):
        config = Config(front, log_config=None, server_header=False, access_log=False)
        config.load()
        protocol = BoundedHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
        transport = CountingTransport(keep=1)
        protocol.connection_made(transport)  # type: ignore[arg-type]
        feed = protocol.data_received
        for name, data in rows:
            await answers(feed, data, transport, 1)
            assert transport.writes[-1].startswith(b"HTTP/1.1 200 OK"), transport.writes[-1][:300]
            n = requests // 10 if b"count=1000" in data else requests
            if inside is not None:
                out[name] = await count_answers(feed, data, transport, n, inside)
                continue
            best = float("inf")
            for _ in range(rounds):
                start = time.perf_counter()
                await answers(feed, data, transport, n)
                best = min(best, (time.perf_counter() - start) / n)
                await asyncio.sleep(0)
            out[name] = best
            if profile == name:
                prof = cProfile.Profile()
                prof.enable()
                await answers(feed, data, transport, n)
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
    ap.add_argument("--only-rows", default="", help="with --instructions: the rows counted (names as printed)")
    ap.add_argument("--only", help=argparse.SUPPRESS)  # one row, in the process callgrind runs
    ap.add_argument("--inside", help=argparse.SUPPRESS)  # the callgrind output file, in the process callgrind runs
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
                measure(
                    Settings(state_dir=Path(tmp) / "a"), rows, args.requests, args.rounds, args.profile, args.inside
                )
            )
        )
        keys = Path(tmp) / "keys.toml"
        digest = hashlib.sha256(KEY.encode()).hexdigest()
        keys.write_text(f'[[key]]\nname = "bench"\nsha256 = "{digest}"\nscopes = ["issue"]\n')
        settings = Settings(state_dir=Path(tmp) / "b", api_keys_file=keys)
        with_keys = (
            {}
            if not keyed
            else asyncio.run(measure(settings, keyed, args.requests, args.rounds, args.profile, args.inside))
        )
    if args.inside is not None:
        print(json.dumps({**plain, **with_keys}))
        return
    for name, seconds in {**plain, **with_keys}.items():
        print(f"{name:<24} {seconds * 1e6:8.2f} us/request  {1 / seconds:>10,.0f} req/s (one core, in process)")


def count_instructions(args: argparse.Namespace) -> None:
    names = ["wiji", "wiji + key", "wiji count=1000", "uuidv7 count=1000"] + [s for s in args.schemes.split(",") if s]
    names += [f"{s} count=1000" for s in args.batch_schemes.split(",") if s]
    if args.only_rows:
        names = [name for name in names if name in args.only_rows.split(",")]
    for name in names:
        requests = args.requests // 10 if "count=1000" in name else args.requests
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp) / "callgrind.out")
            done = subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    "--collect-atstart=no",
                    "--toggle-collect=*feed_data*",
                    "--toggle-collect=task_step",
                    f"--callgrind-out-file={out}",
                    sys.executable,
                    __file__,
                    *("--only", name, "--inside", out, "--requests", str(requests), "--rounds", "1"),
                    *("--schemes", args.schemes, "--batch-schemes", args.batch_schemes),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
        figure = json.loads(done.stdout.strip().splitlines()[-1])[name]
        print(f"{name:<24} {figure:>10,.0f} instructions/request")


if __name__ == "__main__":
    main()
