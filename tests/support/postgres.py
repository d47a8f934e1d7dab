"""pytest plugin: a real PostgreSQL (Debian's ``postgresql`` package) for the tests that run SQL against one.

Fixtures:

* ``postgres_server`` (session): a fresh cluster (``initdb``) in a temporary directory, serving on 127.0.0.1 on a
  free port (and a Unix socket in the same directory), ready before the first test uses it, stopped by its PID at
  the end of the session. It has ``.dsn`` (for ``psycopg.connect``), ``.pid``, ``.url(dbname)`` (a libpq URI),
  ``.stop()`` (fast shutdown, wait), ``.start()`` (again on the same port and data directory), ``.pause()`` /
  ``.resume()`` (SIGSTOP / SIGCONT to every process of the cluster: a stalled server that accepts connections and
  never answers) and ``.execute(sql, dbname)``. A test that stops or pauses it need not undo it: ``postgres_db``
  does afterwards.
* ``postgres_db`` (function): a database of its own for the test (``t_<random>``) on the session's cluster,
  yielded as its libpq URI, dropped afterwards; the cluster is running again (resumed, restarted) before and after.
* ``postgres_schema`` (function): a schema of its own for the test (``t_<random>``, a :class:`PostgresSchema`) in
  one database the session's tests share (``tests``, made once): what an ``idmint serve`` needs is
  ``.env()`` (``IDMINT_POSTGRES_URL`` and ``IDMINT_POSTGRES_SCHEMA``). A schema costs a few ms where a database
  costs a copy of the template (about 25 times as long); tests that look inside the tables use ``.schema``. Dropped
  afterwards (after ending the shared database's other sessions: one worker runs one test at a time).

Role ``idmint_pw`` (created by ``postgres_server``) logs in with a password only (``scram-sha-256``), the password
being :data:`PASSWORD`: the tests of a wrong password use it; every other role is trusted.

PostgreSQL refuses to run as root: under root the cluster is made and run as the ``nobody`` user (``setpriv``).
No test is skipped for want of PostgreSQL: a missing binary fails the test with how to install it
(``bash .ci/install-debian-packages.sh``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.server import _children, free_port, until_stopped

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.05
INITDB_LOCALE = ("-E", "UTF8", "--locale=C.UTF-8", "--locale-provider=icu", "--icu-locale=en-US")
"""Text compares by ICU's en-US collation (as on most production servers), not byte by byte: so a test shows
what ``COLLATE "C"`` is for."""
RUN_AS = "nobody"
"""The user the cluster runs as when the tests run as root."""
PASSWORD_ROLE = "idmint_pw"
PASSWORD = "right-horse-battery"
"""The password of role :data:`PASSWORD_ROLE` (the only role that must give one)."""


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
    command: list[str]
    run_as: str | None = None

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres connect_timeout=5"

    def url(self, dbname: str = "postgres", user: str | None = None, password: str | None = None) -> str:
        """A libpq URI to ``dbname`` as ``user`` (default: the superuser, no password)."""
        who = user or self.user
        secret = f":{password}" if password is not None else ""
        return f"postgresql://{who}{secret}@127.0.0.1:{self.port}/{dbname}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def execute(self, sql: str, dbname: str = "postgres") -> list[tuple[object, ...]]:
        """Run ``sql`` (autocommit) as the superuser; its rows ([] for none)."""
        import psycopg

        with psycopg.connect(self.dsn.replace("dbname=postgres", f"dbname={dbname}"), autocommit=True) as conn:
            cursor = conn.execute(sql.encode())
            return cursor.fetchall() if cursor.description is not None else []

    def stop(self) -> None:
        """SIGINT (PostgreSQL's fast shutdown) and wait; SIGKILL if it does not stop in time."""
        self.resume()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def start(self) -> None:
        """Start again on the same port and data directory; wait until it answers."""
        if self.running:
            return
        self._launch()
        self.wait_ready()

    def pause(self) -> None:
        """SIGSTOP every process of the cluster, the postmaster first (it forks no more backends), then its
        children (each backend is a session of its own, so no process-group signal reaches them all):
        connections are accepted by the kernel, and nothing answers. Returns once every one of them is stopped."""
        pids = [self.process.pid, *_children(self.process.pid)]
        self._signal(signal.SIGSTOP, pids)
        until_stopped(pids)

    def resume(self) -> None:
        """SIGCONT every process of the cluster (children first: the postmaster finds them running)."""
        if self.process.poll() is None:
            self._signal(signal.SIGCONT, [*_children(self.process.pid), self.process.pid])

    def _signal(self, sig: signal.Signals, pids: list[int]) -> None:
        if self.process.poll() is not None:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _launch(self) -> None:
        self._log = open(self.directory / "postgres.log", "ab")  # closed by stop()
        self.process = subprocess.Popen(
            self.command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ready(self):
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"PostgreSQL did not start: {(self.directory / 'postgres.log').read_text()[-2000:]}")
            time.sleep(POLL_S)


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


def start_postgres(directory: Path | None = None, *settings: str, port: int | None = None) -> PostgresServer:
    """A fresh cluster in ``directory`` (default: a new temporary one), started on loopback port ``port`` (default: a
    free one), ready, with the password-only role :data:`PASSWORD_ROLE`; ``settings`` are extra ``name=value`` server
    settings.
    Stop it with :meth:`PostgresServer.stop` (the directory stays: remove it when done)."""
    binaries = find_postgres_bin()
    run_as = RUN_AS if os.geteuid() == 0 else None
    user = run_as or pwd.getpwuid(os.geteuid()).pw_name
    directory = directory or Path(tempfile.mkdtemp(prefix="idmint-pg-"))
    if run_as:
        entry = pwd.getpwnam(run_as)
        os.chown(directory, entry.pw_uid, entry.pw_gid)
    data = directory / "data"
    subprocess.run(
        _as_user([str(binaries / "initdb"), "-D", str(data), "-U", user, "--auth=trust", *INITDB_LOCALE], run_as),
        check=True,
        capture_output=True,
    )
    hba = data / "pg_hba.conf"
    hba.write_text(f"host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    port = port or free_port()
    command = [str(binaries / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port), "-k", str(directory)]
    for setting in ("fsync=off", "max_connections=200", *settings):
        command += ["-c", setting]
    server = PostgresServer(None, port, user, directory, _as_user(command, run_as), run_as)
    server._launch()
    try:
        server.wait_ready()
        server.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'")
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()
        with contextlib.suppress(OSError):
            shutil.rmtree(server.directory)


SHARED_DB = "tests"
"""The database the tests of :func:`postgres_schema` share, each in a schema of its own."""


@dataclass
class PostgresSchema:
    """A test's own schema: ``url`` (the shared database, as the superuser), ``schema``, ``dbname``."""

    url: str
    schema: str
    dbname: str

    def env(self) -> dict[str, str]:
        """The settings of an ``idmint serve`` whose tables live in this schema."""
        return {"IDMINT_POSTGRES_URL": self.url, "IDMINT_POSTGRES_SCHEMA": self.schema}


@pytest.fixture(scope="session")
def postgres_shared_db(postgres_server: PostgresServer) -> str:
    """The database :func:`postgres_schema`'s schemas live in, made once a session: its name."""
    postgres_server.execute(f"CREATE DATABASE {SHARED_DB}")
    return SHARED_DB


@pytest.fixture
def postgres_schema(postgres_server: PostgresServer, postgres_shared_db: str) -> Iterator[PostgresSchema]:
    """A schema of this test's own in the shared database (see the module's docstring)."""
    postgres_server.resume()
    postgres_server.start()
    name = f"t_{secrets.token_hex(6)}"
    try:
        yield PostgresSchema(postgres_server.url(postgres_shared_db), name, postgres_shared_db)
    finally:
        postgres_server.resume()
        postgres_server.start()
        with contextlib.suppress(Exception):
            postgres_server.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{postgres_shared_db}' AND pid <> pg_backend_pid()"
            )
            postgres_server.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE", postgres_shared_db)


@pytest.fixture
def postgres_db(postgres_server: PostgresServer) -> Iterator[str]:
    """A database of this test's own on the session's cluster: its libpq URI (as the superuser)."""
    postgres_server.resume()
    postgres_server.start()
    name = f"t_{secrets.token_hex(6)}"
    postgres_server.execute(f"CREATE DATABASE {name}")
    try:
        yield postgres_server.url(name)
    finally:
        postgres_server.resume()
        postgres_server.start()
        with contextlib.suppress(Exception):
            postgres_server.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def pg_dump(url: str, dump: Path) -> None:
    """``pg_dump -Fc`` of the database at ``url`` into ``dump`` (a backup, as an operator takes one)."""
    subprocess.run([str(find_postgres_bin() / "pg_dump"), "-Fc", "-f", str(dump), url], check=True, timeout=120)


def pg_restore(url: str, dump: Path) -> None:
    """``pg_restore --clean --if-exists`` of ``dump`` into the database at ``url`` (the backup put back in place)."""
    tool = find_postgres_bin() / "pg_restore"
    subprocess.run([str(tool), "--clean", "--if-exists", "-d", url, str(dump)], check=True, timeout=120)
