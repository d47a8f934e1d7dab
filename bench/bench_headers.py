"""Memory and answers under huge and unfinished request headers: uvicorn's plain httptools protocol beside
app.serving's bounded one (what ``idmint serve`` runs), each serving this checkout's app with one worker.

Per round and protocol, alternated: one 8 MB header in a complete request (the status answered), then 24
connections each sending an unfinished 10 MB header (no final CRLF) and keeping the connection open; the server's
resident memory (VmRSS) before, at its peak while they send, and after the senders stop sending (still
connected), and how many of the 24 the server closed.

Usage: python bench/bench_headers.py [--rounds 2]. Nothing here asserts: it prints.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import rss_kib, start, stop

PLAIN, BOUNDED = "httptools", "app.serving:BoundedHttpToolsProtocol"
MB = 1024 * 1024


def one_big_header(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        try:
            sock.sendall(b"GET /v1/ids/wiji HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (8 * MB) + b"\r\n\r\n")
        except OSError:
            pass
        try:
            return sock.recv(200).split(b"\r\n")[0].decode() or "closed"
        except OSError as exc:
            return f"closed ({exc.__class__.__name__})"


def unfinished_headers(port: int, pid: int) -> tuple[int, int, int, int]:
    """(RSS before, peak, after the sending, connections the server closed) in MiB / count."""
    before = rss_kib(pid)
    peak = before
    closed = 0
    socks: list[socket.socket] = []
    lock = threading.Lock()

    def send() -> None:
        nonlocal closed
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        with lock:
            socks.append(sock)
        try:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
            for _ in range(10 * 16):
                sock.sendall(b"a" * 65536)
        except OSError:
            with lock:
                closed += 1

    threads = [threading.Thread(target=send) for _ in range(24)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_kib(pid))
        time.sleep(0.01)
    after = rss_kib(pid)
    for sock in socks:
        sock.close()
    return before // 1024, peak // 1024, after // 1024, closed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as plain_dir, tempfile.TemporaryDirectory() as bounded_dir:
        for n in range(args.rounds):
            for http, state in ((PLAIN, plain_dir), (BOUNDED, bounded_dir)):
                proc, base = start(["--factory", "app.main:create_app"], {"IDMINT_STATE_DIR": state}, http=http)
                port = int(base.rsplit(":", 1)[1])
                try:
                    status = one_big_header(port)
                    before, peak, after, closed = unfinished_headers(port, proc.pid)
                finally:
                    stop(proc)
                print(
                    f"round {n + 1} {http:>38}: 8 MB header -> {status!r}; 24 x unfinished 10 MB: RSS {before} MiB "
                    f"before, peak {peak} MiB, {after} MiB after sending; {closed}/24 closed by the server"
                )


if __name__ == "__main__":
    main()
