"""What ``next`` costs through the front, in-process: a plain sequence against one with a template, for one integer
and for ``count=1000``, and (``--baseline DIR``) this revision's plain ``next`` against another revision's.

Each kind is a real app (:func:`app.main.create_app`, embedded storage in a temporary state directory, lifespan
started) called as uvicorn calls it, ``GET /v1/sequences/{name}/next?count=N`` through
:class:`~app.api.front.Front` (the hot route), with a sequence whose buffer is warm. Kinds:

* ``plain-1``, ``plain-1000``: a sequence created with name, start and cache only (the hot path);
* ``template-1``, ``template-1000``: ``reset`` daily in Europe/Paris, template ``INV-{yyyy}{mm}{dd}-{seq:06}``;
* ``check-1``, ``check-1000``: the same with ``{check}`` and a Luhn check digit.

The kinds are timed in turn, round after round (alternated), and the median microseconds per request of the rounds
are printed with the ratio to plain. With ``--baseline DIR`` (a source tree of another revision, such as
``git archive 3db472e | tar -x -C /tmp/base``), each round also runs ``plain-1`` and ``plain-1000`` in a subprocess
of each revision (this one and DIR, alternated, the same interpreter), and prints the ratio of medians.

Usage: python bench/bench_sequence_next.py [--rounds 9] [--requests 20000] [--baseline DIR]
Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

KINDS: dict[str, tuple[dict[str, Any], int]] = {
    "plain-1": ({}, 1),
    "plain-1000": ({}, 1000),
    "template-1": ({"reset": "daily", "time_zone": "Europe/Paris", "template": "INV-{yyyy}{mm}{dd}-{seq:06}"}, 1),
    "template-1000": ({"reset": "daily", "time_zone": "Europe/Paris", "template": "INV-{yyyy}{mm}{dd}-{seq:06}"}, 1000),
    "check-1": (
        {
            "reset": "daily",
            "time_zone": "Europe/Paris",
            "template": "INV-{yyyy}{mm}{dd}-{seq:06}{check}",
            "check_digit": "luhn",
        },
        1,
    ),  # fmt: skip
    "check-1000": (
        {
            "reset": "daily",
            "time_zone": "Europe/Paris",
            "template": "INV-{yyyy}{mm}{dd}-{seq:06}{check}",
            "check_digit": "luhn",
        },
        1000,
    ),  # fmt: skip
}


async def _measure(kinds: list[str], rounds: int, requests: int) -> dict[str, list[float]]:
    """Microseconds per request of each kind, per round (kinds alternated within each round)."""
    sys.path.insert(0, os.getcwd())
    from app.main import create_app
    from app.settings import Settings

    out: dict[str, list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as state:
        front = create_app(Settings(state_dir=Path(state), max_count=100_000))
        api = front.app  # type: ignore[attr-defined]
        async with api.router.lifespan_context(api):
            names = {}
            for i, kind in enumerate(kinds):
                settings, _ = KINDS[kind]
                name = names[kind] = f"k{i}"
                body = json.dumps({"name": name, "cache": 1_000_000, **settings}).encode()
                sent: list[dict[str, Any]] = []
                await _call(front, "POST", "/v1/sequences", b"", body, sent)
                if sent[0]["status"] not in (200, 201):
                    raise SystemExit(f"creating {kind} failed: {sent}")
            for _ in range(rounds):
                for kind in kinds:
                    _, count = KINDS[kind]
                    path, query = f"/v1/sequences/{names[kind]}/next", f"count={count}".encode()
                    n = max(10, requests // count) if count > 1 else requests
                    sent = []
                    for _ in range(50):  # warm: buffer reserved, caches filled
                        await _call(front, "GET", path, query, b"", sent)
                    sent.clear()
                    start = time.perf_counter()
                    for _ in range(n):
                        await _call(front, "GET", path, query, b"", sent)
                    elapsed = time.perf_counter() - start
                    if any(m.get("status", 200) != 200 for m in sent):
                        raise SystemExit(f"{kind}: a request failed: {sent[:2]}")
                    sent.clear()
                    out[kind].append(elapsed / n * 1e6)
    return out


async def _call(front: Any, method: str, path: str, query: bytes, body: bytes, sent: list[dict[str, Any]]) -> None:
    headers = [(b"host", b"bench")]
    if body:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            await asyncio.sleep(3600)
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            sent.append({"status": message["status"]})

    await front(scope, receive, send)


def child(kinds: list[str], rounds: int, requests: int) -> None:
    """Run in a subprocess whose working directory is a revision's tree: print the medians as JSON."""
    measured = asyncio.run(_measure(kinds, rounds, requests))
    print(json.dumps({kind: statistics.median(v) for kind, v in measured.items()}))


def run_revision(tree: Path, kinds: list[str], requests: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env = {k: v for k, v in env.items() if not k.startswith("IDMINT_")}
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.bench_sequence_next import child; "
        f"child({kinds!r}, 1, {requests})"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--requests", type=int, default=20_000, help="requests per kind per round (count=1)")
    ap.add_argument("--baseline", type=Path, help="another revision's source tree: plain next compared with it")
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    os.chdir(ROOT)
    measured = asyncio.run(_measure(kinds, args.rounds, args.requests))
    print(f"next through the front, in-process: median us/request of {args.rounds} alternated rounds")
    print(f"{'kind':<16}{'median us':>12}{'min':>10}{'max':>10}{'/ plain':>10}")
    for kind in kinds:
        values = measured[kind]
        plain = measured.get("plain-" + kind.rsplit("-", 1)[1])
        ratio = statistics.median(values) / statistics.median(plain) if plain else float("nan")
        print(f"{kind:<16}{statistics.median(values):>12.2f}{min(values):>10.2f}{max(values):>10.2f}{ratio:>10.2f}")
    if args.baseline is not None:
        plain = ["plain-1", "plain-1000"]
        mine: dict[str, list[float]] = {k: [] for k in plain}
        base: dict[str, list[float]] = {k: [] for k in plain}
        for _ in range(args.rounds):
            for tree, into in ((ROOT, mine), (args.baseline.resolve(), base)):
                for kind, value in run_revision(tree, plain, args.requests).items():
                    into[kind].append(value)
        print(f"\nplain next, this revision against {args.baseline} ({args.rounds} alternated subprocess rounds)")
        print(f"{'kind':<16}{'this us':>10}{'base us':>10}{'this/base':>11}")
        for kind in plain:
            a, b = statistics.median(mine[kind]), statistics.median(base[kind])
            print(f"{kind:<16}{a:>10.2f}{b:>10.2f}{a / b:>11.3f}")


if __name__ == "__main__":
    main()
