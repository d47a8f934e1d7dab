"""The tests' fork server (tests/support/forkserver.py): a forked ``idmint serve`` is a fresh process in all that a
test can see (its own random bits, its own Prometheus registry, session, open-file limit, log, exit status), and
the starts that could differ from an exec'd one are exec'd."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import forkserver
from tests.support import server as server_support
from tests.support.server import Server, clean_environment, run_idmint, running_server

pytestmark = pytest.mark.integration  # real idmint serve processes

ULID_RANDOM_CHARS = 16
"""The last 16 Crockford base32 characters of a ULID: its 80 random bits."""
UUIDV7_TIMESTAMP_HEX = 12
"""The first 12 hex digits of a UUIDv7: its 48-bit Unix millisecond timestamp; the rest is version, variant and
random bits."""
BATCH = 1000
"""A batch drawn from OpenSSL's generator (:data:`app.schemes.base.CSPRNG_SMALL_DRAW` bytes and more)."""


def _sample(metrics: str, name: str, **labels: str) -> float:
    """One sample of the Prometheus text ``metrics``; 0 when absent."""
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2 :].split()[1])


@pytest.fixture
def two_forked(tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    with running_server(tmp_path / "a") as a, running_server(tmp_path / "b") as b:
        assert a.forked and b.forked, "the fork server is switched off (IDMINT_TEST_FORK=0)"
        yield a, b


def test_two_forked_servers_draw_different_random_bits(two_forked: tuple[Server, Server]) -> None:
    a, b = two_forked
    for count in (1, BATCH):  # os.urandom, then ssl.RAND_bytes (reseeded after fork)
        ulids = [{text[-ULID_RANDOM_CHARS:] for text in server.issue("ulid", count)} for server in (a, b)]
        assert not ulids[0] & ulids[1]
        uuids = [{uuid.UUID(t).hex[UUIDV7_TIMESTAMP_HEX:] for t in server.issue("uuidv7", count)} for server in (a, b)]
        assert not uuids[0] & uuids[1]


def test_a_forked_server_is_a_fresh_process_of_its_own(two_forked: tuple[Server, Server]) -> None:
    a, b = two_forked
    zygote = forkserver.fork_server("", {}).pid
    for server in (a, b):
        assert _parent(server.pid) == zygote
        assert os.getsid(server.pid) == server.pid  # a session (and process group) of its own
        assert f"[{server.pid}]" in server.log()  # uvicorn's start lines name the child's own PID
        assert Path(f"/proc/{server.pid}/comm").read_bytes().strip() == forkserver.CHILD_NAME
    assert Path(f"/proc/{zygote}/comm").read_bytes().strip() == forkserver.ZYGOTE_NAME
    a.issue("wiji", 5)
    assert _sample(a.metrics_text(), "idmint_ids_issued_total", scheme="wiji") == 5
    assert _sample(b.metrics_text(), "idmint_ids_issued_total", scheme="wiji") == 0
    assert _sample(b.metrics_text(), "process_start_time_seconds") >= _sample(
        a.metrics_text(), "process_start_time_seconds"
    )


def test_a_forked_server_takes_its_limits_and_exits_with_its_status(tmp_path: Path) -> None:
    server = Server(tmp_path, {}, open_files=256)
    server.wait_ready()
    assert server.forked
    limits = Path(f"/proc/{server.pid}/limits").read_text()
    assert any(
        line.startswith("Max open files") and line.split()[3:5] == ["256", "256"] for line in limits.splitlines()
    )
    server.proc.send_signal(signal.SIGKILL)
    assert server.proc.wait(timeout=60) == -signal.SIGKILL
    assert server.proc.poll() == -signal.SIGKILL
    assert server.stop() == -signal.SIGKILL


@pytest.mark.parametrize(
    ("env", "workers"),
    [
        ({"PROMETHEUS_MULTIPROC_DIR": "/nonexistent"}, 1),  # read by prometheus-client at import
        ({"LD_PRELOAD": ""}, 1),  # libfaketime and the like act on a fresh exec
        ({}, 2),  # uvicorn's supervisor spawns fresh workers
    ],
)
def test_starts_that_could_differ_from_a_fresh_process_are_execed(env: dict[str, str], workers: int) -> None:
    base = {**clean_environment(), "PYTHONUNBUFFERED": "1"}
    assert forkserver.can_fork({**base, "IDMINT_PORT": "1"}, base, 1)
    assert not forkserver.can_fork({**base, **env}, base, workers)


def test_the_switch_turns_forking_off(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {**clean_environment(), "PYTHONUNBUFFERED": "1"}
    monkeypatch.setenv(forkserver.SWITCH, "0")
    assert not forkserver.can_fork(base, base, 1)


def test_a_server_sigterm_did_not_stop_in_time_is_sigkilled_and_named_for_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shutdown that hangs is a bug: the harness kills the server and names it, its test and its log, in the
    run's last section (a file of notes the session reads at the end); a server that stops in time is not named."""
    notes = tmp_path / "hung-stops.txt"
    monkeypatch.setenv(server_support.HUNG_STOPS_ENV, str(notes))
    prompt = Server(tmp_path, {})
    prompt.wait("/healthz")
    assert prompt.stop() == -signal.SIGTERM  # uvicorn ends by the signal it handled
    assert not notes.exists()
    hung = Server(tmp_path, {})
    hung.wait("/healthz")
    assert hung.stop(timeout=0) == -signal.SIGKILL  # no shutdown finishes in no time: as if it hung
    (line,) = notes.read_text().splitlines()
    assert (
        line.startswith("tests/test_forkserver.py::test_a_server_sigterm_did_not_stop_in_time")
        and str(hung.log_path) in line
    ), line


# -- run_idmint: one-shot idmint commands ----------------------------------------------------------------------------


def _children(pid: int) -> set[int]:
    return {int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


@pytest.fixture
def exec_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The commands :func:`run_idmint` exec'd (through :func:`subprocess.run`), each still run."""
    calls: list[list[str]] = []
    real_run = subprocess.run

    def spy(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        calls.append(command)
        return real_run(command, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    return calls


def test_run_idmint_forks_with_the_environment_cwd_and_stdin_given_and_streams_apart(
    tmp_path: Path, exec_calls: list[list[str]]
) -> None:
    env = {**clean_environment(), "IDMINT_STATE_DIR": "state"}  # relative: under cwd
    (tmp_path / "times.txt").write_text("2021-03-04T05:06:07.890Z\n")
    done = run_idmint(["backfill", "ulid", "--times-file", "times.txt"], env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.args == [*server_support.idmint_command(), "backfill", "ulid", "--times-file", "times.txt"]
    (first,) = done.stdout.splitlines()
    assert "state directory" in done.stderr and "state directory" not in done.stdout
    assert (tmp_path / "state").is_dir()
    piped = run_idmint(
        ["backfill", "ulid", "--times-file", "-"], env=env, cwd=tmp_path, input="2021-03-04T05:06:07.890Z\n"
    )
    (second,) = piped.stdout.splitlines()
    assert second[:10] == first[:10] and second != first  # the same millisecond (a ULID's first 10 characters)
    refused = run_idmint(["mint", "wiji"], env={**env, "IDMINT_CLUSTER_ID": "17"}, cwd=tmp_path, text=False)
    assert refused.returncode == 1 and refused.stdout == b"" and b"cluster_id must be in 0..15" in refused.stderr
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run_idmint(["decode", "definitely-not-an-id"], check=True)
    assert failed.value.returncode == 1 and "not an ID of any scheme" in failed.value.stderr
    assert exec_calls == []


def test_run_idmint_past_its_timeout_kills_the_command(exec_calls: list[list[str]]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        assert run_idmint(["--version"]).returncode == 0  # the zygote runs (this may be the worker's first start)
        zygote = forkserver.fork_server("", {}).pid if forkserver.enabled() else None
        before = _children(zygote) if zygote else set()
        with pytest.raises(subprocess.TimeoutExpired):
            run_idmint(["admin", "--server", url, "claims"], timeout=1)
    if zygote:
        assert _children(zygote) == before
    assert exec_calls == []


@pytest.mark.parametrize("env", [{"LD_PRELOAD": ""}, {forkserver.SWITCH: "0"}])
def test_run_idmint_execs_what_the_zygote_cannot_honour(
    env: dict[str, str], exec_calls: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_idmint(["--version"]).returncode == 0  # the zygote runs, started without ``env``
    exec_calls.clear()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    done = run_idmint(["decode", "definitely-not-an-id"])
    assert done.returncode == 1 and "not an ID of any scheme" in done.stderr and done.stdout == ""
    assert exec_calls == [done.args]


def test_free_ports_are_below_the_ephemeral_range_and_bindable() -> None:
    low = int(server_support.EPHEMERAL_RANGE.read_text().split()[0])
    ports = {server_support.free_port() for _ in range(50)}
    assert all(low - server_support.TEST_PORTS <= port < low for port in ports), sorted(ports)
    assert len(ports) == 50  # each handed out once while its holder lives (claimed), picked at random
    assert all((server_support.PORT_CLAIMS / str(port)).read_text() == str(os.getpid()) for port in ports)
    for port in ports:
        with socket.create_server(("127.0.0.1", port)):
            pass
    # An outgoing connection's source port is ephemeral: never one of these.
    with socket.create_server(("127.0.0.1", 0)) as listener, socket.create_connection(listener.getsockname()) as out:
        assert out.getsockname()[1] >= low
