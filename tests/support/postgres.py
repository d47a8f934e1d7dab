"""pytest plugin: a real PostgreSQL (Debian's ``postgresql`` package) for the tests that run SQL against one.

Fixture ``postgres_server`` (session): a fresh cluster (``initdb``) in a temporary directory, serving on 127.0.0.1
on a free port (and a Unix socket in the same directory), ready before the first test uses it, stopped by its PID
at the end of the session. It has ``.dsn`` (for ``psycopg.connect``) and ``.pid``.

PostgreSQL refuses to run as root: under root the cluster is made and run as the ``nobody`` user (``setpriv``).
No test is skipped for want of PostgreSQL: a missing binary fails the test with how to install it
(``bash .ci/install-debian-packages.sh``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.server import free_port

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.05
INITDB_LOCALE = ("-E", "UTF8", "--locale=C.UTF-8", "--locale-provider=icu", "--icu-locale=en-US")
"""Text compares by ICU's en-US collation (as on most production servers), not byte by byte: so a test shows
what ``COLLATE "C"`` is for."""
RUN_AS = "nobody"
"""The user the cluster runs as when the tests run as root."""


def find_postgres_bin() -> Path:
    """The newest ``/usr/lib/postgresql/<major>/bin`` (Debian's layout); fails the test run if there is none."""
    root = Path("/usr/lib/postgresql")
    found = sorted((p for p in root.glob("*/bin") if (p / "postgres").is_file()), key=lambda p: int(p.parent.name))
    if not found:
        pytest.fail(
            "PostgreSQL not found under /usr/lib/postgresql: the bounds SQL tests need a real one; run "
            "bash .ci/install-debian-packages.sh (it installs Debian's postgresql)",
            pytrace=False,
        )
    return found[-1]


@dataclass
class PostgresServer:
    """A running PostgreSQL: ``dsn`` reaches it as the cluster's superuser, database ``postgres``."""

    process: subprocess.Popen[bytes]
    port: int
    user: str
    directory: Path

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres connect_timeout=5"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        """SIGINT (PostgreSQL's fast shutdown) and wait; SIGKILL if it does not stop in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _as_user(args: list[str], user: str | None) -> list[str]:
    """``args`` run as ``user`` (None: as we are) by ``setpriv``, which execs: the PID is the server's own."""
    if user is None:
        return args
    entry = pwd.getpwnam(user)
    return ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups", "--", *args]


def _ready(server: PostgresServer) -> bool:
    import psycopg

    try:
        with psycopg.connect(server.dsn):
            return True
    except psycopg.OperationalError:
        return False


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    binaries = find_postgres_bin()
    run_as = RUN_AS if os.geteuid() == 0 else None
    user = run_as or pwd.getpwuid(os.geteuid()).pw_name
    directory = Path(tempfile.mkdtemp(prefix="idmint-pg-"))
    if run_as:
        entry = pwd.getpwnam(run_as)
        os.chown(directory, entry.pw_uid, entry.pw_gid)
    data = directory / "data"
    subprocess.run(
        _as_user([str(binaries / "initdb"), "-D", str(data), "-U", user, "--auth=trust", *INITDB_LOCALE], run_as),
        check=True,
        capture_output=True,
    )
    port = free_port()
    log = open(directory / "postgres.log", "wb")  # noqa: SIM115 - closed after the server stops
    process = subprocess.Popen(
        _as_user(
            [
                str(binaries / "postgres"),
                "-D",
                str(data),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-k",
                str(directory),
                "-c",
                "fsync=off",
            ],
            run_as,
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = PostgresServer(process, port, user, directory)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ready(server):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"PostgreSQL did not start: {(directory / 'postgres.log').read_text()[-2000:]}")
            time.sleep(POLL_S)
        yield server
    finally:
        server.stop()
        log.close()
        with contextlib.suppress(OSError):
            shutil.rmtree(directory)
