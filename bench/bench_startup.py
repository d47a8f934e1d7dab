"""Start-up against storage that does not answer: real ``idmint serve`` processes pointed at PostgreSQL or etcd on a
closed loopback port, at a real PostgreSQL with a wrong password, or at a listener that accepts TCP and never
answers (a "blackhole"); the embedded backend as the baseline (its start-up is only loading the process).

Printed per case (seconds from the process's start): the first ``/healthz`` 200, the first ``/readyz`` answer (503),
the first ``/readyz`` whose reason names storage's own fault (refused, password, no answer in time), and, SIGTERM sent
then (a node still starting), how long the process took to exit. Then ``/proc/loadavg``.

Usage: python bench/bench_startup.py [case ...]   (cases: embedded pg-closed pg-password pg-blackhole etcd-closed
etcd-blackhole; default all)
Needs: the dev extras and Debian's postgresql (for pg-password).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.postgres import PASSWORD_ROLE, PostgresServer, start_postgres
from tests.support.server import Server, free_port

CASES = ["embedded", "pg-closed", "pg-password", "pg-blackhole", "etcd-closed", "etcd-blackhole"]
FAULT_WORDS = ("refused", "password", "no answer", "in time", "timeout", "unreachable")
DEADLINE_S = 120.0
POLL_S = 0.05


def measure(name: str, env: dict[str, str], workdir: Path) -> None:
    began = time.monotonic()
    server = Server(workdir / name, env)
    healthy = answered = named = None
    reason = ""
    try:
        while time.monotonic() - began < DEADLINE_S and server.running:
            with contextlib.suppress(httpx.TransportError):
                if healthy is None and httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200:
                    healthy = time.monotonic() - began
                ready = httpx.get(f"{server.url}/readyz", timeout=5)
                answered = answered or time.monotonic() - began
                if ready.status_code == 200:
                    reason = "ready"
                    break
                reasons = [str(s.get("reason")) for s in ready.json()["schemes"].values()]
                fault = next((r for r in reasons if any(w in r for w in FAULT_WORDS)), None)
                if fault is not None:
                    named, reason = time.monotonic() - began, fault
                    break
            time.sleep(POLL_S)
        sent = time.monotonic()
        os.kill(server.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(DEADLINE_S)
        stopped = time.monotonic() - sent
    finally:
        server.stop()

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    print(
        f"{name:15} healthz {shown(healthy):>6}  readyz {shown(answered):>6}  reason {shown(named):>6}  "
        f"SIGTERM->exit {stopped:.2f} (rc {server.proc.returncode})\n{'':16}{reason[:160]}",
        flush=True,
    )


def main(cases: list[str]) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="idmint-bench-startup-"))
    database: PostgresServer | None = None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(128)  # the kernel accepts; nothing ever answers
        hole = silent.getsockname()[1]
        try:
            for case in cases:
                if case == "pg-password" and database is None:
                    database = start_postgres()
                env = {
                    "embedded": {},
                    "pg-closed": {"IDMINT_POSTGRES_URL": f"postgresql://idmint@127.0.0.1:{free_port()}/idmint"},
                    "pg-password": {
                        "IDMINT_POSTGRES_URL": database.url(user=PASSWORD_ROLE, password="wrong") if database else ""
                    },
                    "pg-blackhole": {"IDMINT_POSTGRES_URL": f"postgresql://idmint@127.0.0.1:{hole}/idmint"},
                    "etcd-closed": {"IDMINT_ETCD_ENDPOINTS": f"http://127.0.0.1:{free_port()}"},
                    "etcd-blackhole": {"IDMINT_ETCD_ENDPOINTS": f"http://127.0.0.1:{hole}"},
                }[case]
                measure(case, env, workdir)
        finally:
            if database is not None:
                database.stop()
    print("load", Path("/proc/loadavg").read_text().strip())


if __name__ == "__main__":
    main(sys.argv[1:] or CASES)
