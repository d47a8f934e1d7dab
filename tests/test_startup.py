"""Start-up never waits on network storage: a real ``idmint serve`` pointed at PostgreSQL or etcd that is unreachable
(a closed loopback port), refusing (a wrong password) or silent (a listener that accepts and never answers; a
stopped PostgreSQL) opens its port at once: ``/healthz`` 200, ``/readyz`` 503 naming storage's reason, issuing and
sequences 503 + Retry-After, decoding working; SIGTERM ends it promptly; and once the store answers (started on that
port, the password set, the server resumed) the node becomes ready and issues. The times measured are printed, not
asserted (the machine is shared): bench/bench_startup.py reports them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.etcd import EtcdServer, _two_free_ports
from tests.support.postgres import PASSWORD, PASSWORD_ROLE, PostgresServer, start_postgres
from tests.support.server import Server, free_port
from tests.support.storage import MARGIN_S, TTL_S

pytestmark = pytest.mark.integration  # real idmint serve, PostgreSQL, etcd

DEADLINE_S = 120.0
"""A guard against a condition that never holds (the server's log is then quoted), not a time budget."""
EXIT_BOUND_S = 60.0
"""The longest a SIGTERMed server may take to exit before the test fails (a guard: it takes well under a second)."""
POLL_S = 0.05
SEQUENCE_ROUTE = "/v1/sequences/invoices/next"
PG_REASONS = {
    "closed port": ("refused",),
    "wrong password": (f'password authentication failed for user "{PASSWORD_ROLE}"',),
    "blackhole": ("in time", "timeout"),
}
ETCD_REASONS = {"closed port": ("unreachable",), "blackhole": ("unreachable", "in time")}
SHORT_LEASE = {"IDMINT_LEASE_TTL": str(TTL_S), "IDMINT_LEASE_SAFETY_MARGIN": str(MARGIN_S)}
"""A short lease for nodes on PostgreSQL that must become ready: the identity rows a node creates on a fresh store
are claimable one lease TTL later (the lost-row rule), a wait that is not what these tests check."""


@contextlib.contextmanager
def blackhole() -> Iterator[int]:
    """A loopback port whose listener accepts TCP connections (the kernel completes them) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        yield int(sock.getsockname()[1])


def not_ready_naming(server: Server, words: tuple[str, ...]) -> httpx.Response:
    """Poll ``/readyz`` until it answers 503 with a scheme whose reason holds one of ``words`` (storage's reason,
    not only "connecting"); its answer."""
    deadline = time.monotonic() + DEADLINE_S
    last = ""
    while time.monotonic() < deadline:
        assert server.running, server.log()
        with contextlib.suppress(httpx.TransportError):
            answer = httpx.get(f"{server.url}/readyz", timeout=10)
            assert answer.status_code == 503, answer.text
            reasons = [s.get("reason", "") for s in answer.json()["schemes"].values()]
            if any(w in r for r in reasons for w in words):
                return answer
            last = answer.text
        time.sleep(POLL_S)
    raise AssertionError(f"/readyz never named {words}; last: {last}\n{server.log_tail()}")


def check_starting(server: Server, words: tuple[str, ...]) -> None:
    """What a node whose storage does not answer serves: the port, /healthz, /readyz 503 naming ``words``, 503 +
    Retry-After for issuing and sequences, decoding."""
    started = time.monotonic()
    server.wait("/healthz", timeout=DEADLINE_S)
    healthy = time.monotonic() - started
    not_ready = not_ready_naming(server, words)
    named = time.monotonic() - started
    assert not_ready.headers["retry-after"] == "1"
    print(f"healthz 200 {healthy:.2f} s, /readyz 503 naming storage's reason {named:.2f} s after the first poll")
    issue = server.get("/v1/ids/eight-byte")
    assert issue.status_code == 503 and int(issue.headers["retry-after"]) >= 1, issue.text
    sequence = server.get(SEQUENCE_ROUTE)
    assert sequence.status_code == 503 and int(sequence.headers["retry-after"]) >= 1, sequence.text
    (uuid,) = server.issue("uuidv7")  # leases nothing: issues without storage
    assert server.decode("uuidv7", uuid)["id"] == uuid


def terminate(server: Server) -> float:
    """SIGTERM ``server`` and wait for its exit (failing past :data:`EXIT_BOUND_S`); the seconds it took."""
    sent = time.monotonic()
    os.kill(server.pid, signal.SIGTERM)
    try:
        server.proc.wait(EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        server.kill()
        raise AssertionError(f"SIGTERM did not end the server in {EXIT_BOUND_S:g} s:\n{server.log_tail()}") from None
    took = time.monotonic() - sent
    server.stop()
    assert server.proc.returncode in (0, -signal.SIGTERM), server.log_tail()
    print(f"SIGTERM to exit: {took:.2f} s")
    return took


def ready_and_issuing(server: Server) -> None:
    server.wait_ready(timeout=DEADLINE_S)
    assert len(server.issue("eight-byte", 5)) == 5
    assert server.post_json("/v1/sequences", {"name": "invoices"})["name"] == "invoices"
    assert server.get_json(SEQUENCE_ROUTE)["ids"] == [1]


# -- SIGTERM while storage does not answer ------------------------------------------------------------------------


@pytest.mark.parametrize("fault", list(PG_REASONS))
def test_a_node_whose_postgres_does_not_answer_listens_at_once_and_stops_on_sigterm(
    tmp_path: Path, postgres_server: PostgresServer, fault: str
) -> None:
    with blackhole() as silent:
        url = {
            "closed port": f"postgresql://idmint@127.0.0.1:{free_port()}/idmint",
            "wrong password": postgres_server.url("postgres", PASSWORD_ROLE, "not-" + PASSWORD),
            "blackhole": f"postgresql://idmint@127.0.0.1:{silent}/idmint",
        }[fault]
        server = Server(tmp_path, {"IDMINT_POSTGRES_URL": url})
        try:
            check_starting(server, PG_REASONS[fault])
            terminate(server)
        finally:
            server.stop()
        assert PASSWORD not in server.log()


@pytest.mark.parametrize("fault", list(ETCD_REASONS))
def test_a_node_whose_etcd_does_not_answer_listens_at_once_and_stops_on_sigterm(tmp_path: Path, fault: str) -> None:
    with blackhole() as silent:
        port = free_port() if fault == "closed port" else silent
        server = Server(tmp_path, {"IDMINT_ETCD_ENDPOINTS": f"http://127.0.0.1:{port}"})
        try:
            check_starting(server, ETCD_REASONS[fault])
            terminate(server)
        finally:
            server.stop()


# -- storage that answers later -----------------------------------------------------------------------------------


def test_a_node_started_before_its_postgres_is_ready_once_it_starts_on_that_port(tmp_path: Path) -> None:
    port = free_port()
    server = Server(
        tmp_path,
        {"IDMINT_POSTGRES_URL": f"postgresql://{PASSWORD_ROLE}:{PASSWORD}@127.0.0.1:{port}/postgres", **SHORT_LEASE},
    )
    database: PostgresServer | None = None
    try:
        check_starting(server, PG_REASONS["closed port"])
        database = start_postgres(port=port)
        ready_and_issuing(server)
        terminate(server)
    finally:
        server.stop()
        if database is not None:
            database.stop()
            shutil.rmtree(database.directory, ignore_errors=True)


def test_a_node_refused_for_its_password_is_ready_once_the_role_takes_it(
    tmp_path: Path, postgres_server: PostgresServer, postgres_db: str
) -> None:
    dbname = postgres_db.rsplit("/", 1)[1]
    url = postgres_server.url(dbname, PASSWORD_ROLE, "new-" + PASSWORD)
    server = Server(tmp_path, {"IDMINT_POSTGRES_URL": url, **SHORT_LEASE})
    try:
        check_starting(server, PG_REASONS["wrong password"])
        postgres_server.execute(f"ALTER ROLE {PASSWORD_ROLE} PASSWORD 'new-{PASSWORD}'")
        ready_and_issuing(server)
        terminate(server)
    finally:
        server.stop()
        postgres_server.execute(f"ALTER ROLE {PASSWORD_ROLE} PASSWORD '{PASSWORD}'")


def test_a_node_whose_postgres_accepts_and_never_answers_is_ready_once_it_answers(
    tmp_path: Path, postgres_server: PostgresServer, postgres_db: str
) -> None:
    postgres_server.pause()  # SIGSTOP: the kernel accepts connections, nothing answers
    server = Server(tmp_path, {"IDMINT_POSTGRES_URL": postgres_db, **SHORT_LEASE})
    try:
        check_starting(server, PG_REASONS["blackhole"])
        postgres_server.resume()
        ready_and_issuing(server)
        terminate(server)
    finally:
        server.stop()
        postgres_server.resume()


def test_a_node_started_before_its_etcd_is_ready_once_etcd_starts_on_that_port(tmp_path: Path) -> None:
    client_port, peer_port = _two_free_ports()
    server = Server(tmp_path, {"IDMINT_ETCD_ENDPOINTS": f"http://127.0.0.1:{client_port}"})
    etcd = EtcdServer(tmp_path / "etcd", ports=(client_port, peer_port))
    try:
        check_starting(server, ETCD_REASONS["closed port"])
        etcd.start()
        ready_and_issuing(server)
        terminate(server)
    finally:
        server.stop()
        etcd.stop()
