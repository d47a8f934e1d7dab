"""The tests' one harness for real idmint servers: :class:`Server` starts ``idmint serve`` (or, with
``uvicorn=True``, ``python -m uvicorn --factory app.main:create_app``) on 127.0.0.1 and a free port, waits for it
by condition (``/healthz``, ``/readyz``, every worker's startup line), captures its log, and stops it by PID.

* The environment is the test process's without any ``IDMINT_*`` variable (nor ``PROMETHEUS_MULTIPROC_DIR``), then
  ``IDMINT_STATE_DIR`` (``<workdir>/state-<port>``, unless ``env`` names one) and ``env``: a server sees only the
  settings its test gives it.
* The process runs in a session of its own: :meth:`Server.stop` SIGTERMs its PID and waits, then SIGKILLs what is
  left of its process group (uvicorn's workers); every server still running at interpreter exit is SIGKILLed.
* Its log is ``<workdir>/server-<port>.log`` (or ``log_path``); failures to start quote it.
* A server that SIGTERM did not stop within :data:`STOP_TIMEOUT_S` (a shutdown that hung) is SIGKILLed and named,
  with its test and log, in a section at the end of the run (tests/conftest.py's hooks call this module's).

:func:`serve_process` and :func:`running_server` wrap it as context managers; :func:`free_port` is the suite's
one free-port helper (etcd, PostgreSQL, Prometheus and podman take theirs from here too).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import json
import locale
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from app.metrics.multiprocess import pid_alive
from tests.support.forkserver import (
    ForkedProcess,
    Start,
    can_fork,
    close_fork_server,
    fork_server,
    fork_server_environment,
)
from tests.support.http import share_default_context

share_default_context()  # every poll of a starting server would otherwise build a TLS context (tests/support/http.py)

REPO = Path(__file__).resolve().parents[2]

START_TIMEOUT_S = 120.0
"""A guard against a server that never comes up (its log is then quoted), not a time budget: on a busy machine a
start takes seconds, and the wait ends as soon as the server answers."""
STOP_TIMEOUT_S = 30.0
POLL_S = 0.05
HTTP_TIMEOUT_S = 30.0
UNAVAILABLE_DEADLINE_S = 120.0
"""How long :func:`until_available` asks again: a guard against a node that never recovers, not a time budget."""
RETRY_AFTER_CAP_S = 1.0
"""The longest :func:`until_available` waits between two asks, whatever Retry-After says (the condition is polled)."""

Process = subprocess.Popen[bytes] | ForkedProcess
"""A server process: exec'd (Popen), or forked by this process's fork server."""

HUNG_STOPS_ENV = "IDMINT_TEST_HUNG_STOPS"
"""A file the session's first process names (its workers inherit it) where :meth:`Server.stop` notes each server it
had to SIGKILL; the terminal summary lists them."""

_RUNNING: dict[int, Process] = {}
"""PID -> process of every server started here and not yet stopped (killed at exit as a last resort)."""


@atexit.register
def _kill_leftovers() -> None:
    for pid, proc in list(_RUNNING.items()):
        if proc.poll() is None:
            _killpg(pid)
            proc.wait()
        _RUNNING.pop(pid, None)
    close_fork_server()


def _note_hung_stop(log: Path, timeout: float) -> None:
    path = os.environ.get(HUNG_STOPS_ENV)
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
        with open(path, "a") as out:
            out.write(f"{test}: no exit within {timeout:g} s of SIGTERM (log {log})\n")


_HUNG_STOPS_FILE: list[str] = []
"""The file this process made for :data:`HUNG_STOPS_ENV` (the session's first process only)."""


def start_hung_stops(config: Any) -> None:
    """At the session's start (its first process): make the file of :data:`HUNG_STOPS_ENV`."""
    if not hasattr(config, "workerinput") and HUNG_STOPS_ENV not in os.environ:
        fd, path = tempfile.mkstemp(prefix="idmint-hung-stops-", suffix=".txt")
        os.close(fd)
        os.environ[HUNG_STOPS_ENV] = path
        _HUNG_STOPS_FILE.append(path)


def report_hung_stops(terminalreporter: Any) -> None:
    """At the session's end: the servers whose shutdown hung, in a section of their own (none: no section)."""
    for path in _HUNG_STOPS_FILE:
        with contextlib.suppress(OSError):
            lines = Path(path).read_text().splitlines()
            Path(path).unlink()
            if lines:
                terminalreporter.section("servers whose shutdown hung (SIGKILLed after SIGTERM)")
                for line in lines:
                    terminalreporter.write_line(line)


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _limit_open_files(count: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""The kernel's range of ephemeral ports: the source ports of outgoing connections (and of ``bind(port=0)``)."""
TEST_PORTS = 12_000
"""How many ports below the ephemeral range :func:`free_port` picks from."""


_PICK = random.SystemRandom()
"""Not the ``random`` module's shared generator, which a test may seed: workers seeded alike would pick alike."""


def _below_ephemeral() -> range:
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default
    return range(max(1024, low - TEST_PORTS), max(low, 1024 + TEST_PORTS))


PORT_CLAIMS = Path(tempfile.gettempdir()) / f"idmint-test-ports-{os.getuid()}"
"""One file per port :func:`free_port` handed out on this machine (to every test process of this user: each
pytest-xdist worker, and runs side by side), holding the PID of the process it was handed to: the port stays taken
for the others while that process lives (a session's etcd or database keeps its port through a restart)."""


def _claim(port: int) -> bool:
    """Take ``port`` for this process unless a live process (this one included) holds it: checked and written under
    one lock."""
    claim = PORT_CLAIMS / str(port)
    with open(PORT_CLAIMS / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            holder = int(claim.read_text())
        except (OSError, ValueError):
            holder = 0
        if holder and pid_alive(holder):
            return False
        claim.write_text(str(os.getpid()))
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, held by no other live test process on this machine
    (:data:`PORT_CLAIMS`), and below the kernel's ephemeral range. A test hands the port to a server that binds it
    only once started: meanwhile no other worker's server is handed it, and no outgoing connection takes it as its
    source port (those are ephemeral, as is a port from ``bind(port=0)``). RuntimeError when none is found."""
    ports = _below_ephemeral()
    PORT_CLAIMS.mkdir(exist_ok=True)
    for _ in range(400):
        port = _PICK.choice(ports)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        if _claim(port):
            return port
    raise RuntimeError(f"no free TCP port in {ports.start}..{ports.stop - 1} on 127.0.0.1")


def idmint_command() -> list[str]:
    """``idmint`` as installed (the Dockerfile's CMD), else the same entry point through ``python -m app.cli``."""
    script = Path(sys.executable).parent / "idmint"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "app.cli"]


def run_idmint(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | bytes | None = None,
    timeout: float | None = None,
    text: bool = True,
    check: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """``idmint ARGS...`` as :func:`subprocess.run` with ``capture_output=True`` runs it: ``env`` (default: this
    process's environment) and ``cwd`` (default: this process's) exactly as given, stdin from ``input`` (None:
    /dev/null), stdout and stderr captured apart, ``text`` decoded as subprocess does (locale encoding, universal
    newlines). Raises :class:`subprocess.TimeoutExpired` after ``timeout`` seconds (the process killed first) and,
    with ``check``, :class:`subprocess.CalledProcessError` on a non-zero exit.

    Forked from this process's fork server (tests/support/forkserver.py) when :func:`can_fork` allows it, else
    exec'd; ``args`` of the result is the exec'd command either way."""
    command = [*idmint_command(), *args]
    full_env = dict(os.environ if env is None else env)
    workdir = os.path.abspath(os.getcwd() if cwd is None else cwd)  # the fork server's own cwd is not ours
    if not can_fork(full_env, fork_server_environment(_zygote_environment()), 1):
        return subprocess.run(
            command,
            env=full_env,
            cwd=workdir,
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=text,
            timeout=timeout,
            check=check,
        )
    encoding = "utf-8" if sys.flags.utf8_mode else locale.getencoding()
    argv = command if command[0] != sys.executable else ["idmint", *command[3:]]  # python -m app.cli: its argv
    with tempfile.TemporaryDirectory(prefix="idmint-run-") as scratch:
        out, err, source = (Path(scratch, name) for name in ("stdout", "stderr", "stdin"))
        if input is not None:
            source.write_bytes(input.encode(encoding) if isinstance(input, str) else input)
        stdin = None if input is None else str(source)
        start = Start("idmint", argv, full_env, workdir, str(out), stderr=str(err), stdin=stdin)
        proc = fork_server(str(REPO), _zygote_environment()).start(start)
        try:
            returncode = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise subprocess.TimeoutExpired(command, timeout or 0.0, out.read_bytes(), err.read_bytes()) from None
        stdout: str | bytes = out.read_bytes()
        stderr: str | bytes = err.read_bytes()
    if text:
        stdout, stderr = (_translate_newlines(data, encoding) for data in (stdout, stderr))
    if check and returncode:
        raise subprocess.CalledProcessError(returncode, command, stdout, stderr)
    return subprocess.CompletedProcess(command, returncode, stdout, stderr)


def _translate_newlines(data: str | bytes, encoding: str) -> str:
    """Bytes as subprocess's text mode reads them."""
    assert isinstance(data, bytes)
    return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


def _zygote_environment() -> dict[str, str]:
    """The fork server's environment: a server's (:class:`Server`) without its ``IDMINT_*`` settings."""
    return {**clean_environment(), "PYTHONUNBUFFERED": "1"}


def clean_environment() -> dict[str, str]:
    """The test process's environment without idmint's settings (``IDMINT_*``, ``PROMETHEUS_MULTIPROC_DIR``)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("IDMINT_") and k != "PROMETHEUS_MULTIPROC_DIR"}


def until_available(send: Callable[[], httpx.Response], deadline_s: float = UNAVAILABLE_DEADLINE_S) -> httpx.Response:
    """``send()``'s answer once it is not a 503 with Retry-After, or its last answer after ``deadline_s``.

    A fail-closed node answers 503 + Retry-After while it is unsure its identity is exclusive (its store answered a
    lease or mark write slowly, a lease is being renewed...): the right answer for that moment, after which the
    client asks again. Tests of such a node ask again the same way, waiting what Retry-After says (at most
    :data:`RETRY_AFTER_CAP_S`), until the answer is another or the deadline passes (the test's own assertion then
    shows the last 503). Any other status, and a 503 without Retry-After, is returned at once."""
    deadline = time.monotonic() + deadline_s
    while True:
        response = send()
        retry_after = response.headers.get("retry-after")
        if response.status_code != 503 or retry_after is None or time.monotonic() > deadline:
            return response
        try:
            wait = float(retry_after)
        except ValueError:  # an HTTP date: poll
            wait = RETRY_AFTER_CAP_S
        time.sleep(min(max(wait, POLL_S), RETRY_AFTER_CAP_S, max(0.0, deadline - time.monotonic())))


def _children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def until_stopped(pids: Iterable[int], timeout: float = STOP_TIMEOUT_S) -> None:
    """Wait until every thread of every process of ``pids`` is stopped (state ``T`` in /proc), after a SIGSTOP:
    the signal is delivered to each thread when it next runs, so on a busy machine a process answers a request or
    two after ``kill`` returned. A process that is gone counts as stopped; after ``timeout`` (a guard) it fails."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        while True:
            states = []
            for task in Path(f"/proc/{pid}/task").glob("*/stat"):
                with contextlib.suppress(OSError):
                    stat = task.read_text()
                    states.append(stat[stat.rfind(")") + 2])
            if all(state in "TtZX" for state in states):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"process {pid} did not stop in {timeout:g} s (thread states {states})")
            time.sleep(0.005)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class Server:
    """A real idmint server process on a free loopback port (or ``port``); started without waiting (call
    :meth:`wait`, :meth:`wait_ready`, or use :func:`serve_process`), stopped by PID.

    ``args`` go to ``idmint serve`` after ``--host`` and ``--port`` (``--workers`` is added when ``workers`` > 1).
    ``open_files``: the process's open-file limit (``RLIMIT_NOFILE``, soft and hard), as ``ulimit -n`` sets it.
    """

    def __init__(
        self,
        workdir: Path,
        env: Mapping[str, str] | None = None,
        *args: str,
        port: int | None = None,
        workers: int = 1,
        uvicorn: bool = False,
        log_path: Path | None = None,
        open_files: int | None = None,
    ) -> None:
        self.port = free_port() if port is None else port
        self.workers = workers
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        full_env = clean_environment()
        full_env.update({"PYTHONUNBUFFERED": "1", "IDMINT_STATE_DIR": str(workdir / f"state-{self.port}")})
        full_env.update(env or {})
        self.state_dir = Path(full_env["IDMINT_STATE_DIR"])
        self.log_path = log_path if log_path is not None else _unused(workdir / f"server-{self.port}.log")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if uvicorn:
            command = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app"]
            command += ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning", "--no-access-log"]
        else:
            command = [*idmint_command(), "serve", "--host", "127.0.0.1", "--port", str(self.port)]
            if workers != 1:
                command += ["--workers", str(workers)]
        command += list(args)
        self.forked = can_fork(full_env, fork_server_environment(_zygote_environment()), workers)
        """Whether the process was forked by the fork server (tests/support/forkserver.py), else exec'd."""
        self.proc: Process
        if self.forked:
            entry = "uvicorn" if uvicorn else "idmint"
            argv = command if command[0] != sys.executable else [entry, *command[3:]]  # python -m X: X's argv
            start = Start(entry, argv, full_env, str(REPO), str(self.log_path), open_files)
            self.proc = fork_server(str(REPO), _zygote_environment()).start(start)
        else:
            limit = None if open_files is None else functools.partial(_limit_open_files, open_files)
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    command,
                    cwd=REPO,
                    env=full_env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=limit,
                )
        _RUNNING[self.proc.pid] = self.proc
        self._listened = False
        """Whether the server was seen listening (its first answer, or :meth:`until_listening`)."""

    # -- what it is --------------------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def target(self) -> str:
        """``127.0.0.1:<port>`` (a Prometheus target)."""
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def worker_pids(self) -> list[int]:
        """uvicorn's worker processes (children that run the app); the server itself with one worker."""
        if self.workers == 1:
            return [self.pid]
        return [pid for pid in _children(self.pid) if b"spawn_main" in _cmdline(pid)]

    # -- waiting -----------------------------------------------------------------------------------------------

    def wait(self, path: str = "/healthz", status: int = 200, timeout: float = START_TIMEOUT_S) -> httpx.Response:
        """Poll ``path`` until it answers ``status``; fail with the server's log when it exits first (or
        ``timeout`` passes: a guard, not a budget)."""
        deadline = time.monotonic() + timeout
        last: httpx.Response | None = None
        error = ""
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                last = httpx.get(f"{self.url}{path}", timeout=5.0)
                self._listened = True
                if last.status_code == status:
                    return last
            except httpx.TransportError as exc:
                error = repr(exc)
            if time.monotonic() > deadline:
                body = last.text if last is not None else f"(no answer: {error})"
                raise AssertionError(
                    f"{self.url}{path} did not answer {status} in {timeout:g} s; last: {body}\n{self.log()}"
                )
            time.sleep(POLL_S)

    def until_listening(self, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until the server accepts a TCP connection on its port, once: a request sent before it bound its
        port would be refused (``httpx.ConnectError``), which says nothing of the server. Returns at once when it
        was seen listening before, or when its process has exited (the request that follows then fails as it
        should); after ``timeout`` (a guard) the request that follows shows what happened."""
        deadline = time.monotonic() + timeout
        while not self._listened and self.proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=5.0).close()
            except OSError:
                time.sleep(POLL_S)
            else:
                self._listened = True

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until ``/readyz`` answers 200 and, with more than one worker, every worker logged its startup
        (any one of them may answer ``/readyz``)."""
        deadline = time.monotonic() + timeout
        while self.workers > 1 and self.log().count("Application startup complete") < self.workers:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.workers} worker(s) did not start in {timeout:g} s:\n{self.log()}")
            time.sleep(POLL_S)
        self.wait("/readyz", timeout=max(1.0, deadline - time.monotonic()))

    # -- stopping ----------------------------------------------------------------------------------------------

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM by PID and wait for the exit (SIGKILL to its process group after ``timeout``); then SIGKILL
        whatever of its group is left. Returns the exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _killpg(self.proc.pid)
                self.proc.wait()
                _note_hung_stop(self.log_path, timeout)
        self._kill_workers()
        _RUNNING.pop(self.proc.pid, None)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL (and its workers): no clean release, no final mark; a lease must expire on its own."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._kill_workers()
        _RUNNING.pop(self.proc.pid, None)

    def _kill_workers(self) -> None:
        """SIGKILL what is left of the server's process group (uvicorn's workers outliving a killed server)."""
        if self.workers > 1:
            _killpg(self.proc.pid)

    # -- talking to it -----------------------------------------------------------------------------------------

    def get(self, path: str, **params: Any) -> httpx.Response:
        """GET ``path`` once: whatever it answers (a 503 included). A server not yet seen listening is waited for
        first (:meth:`until_listening`)."""
        self.until_listening()
        return httpx.get(f"{self.url}{path}", params=params, timeout=HTTP_TIMEOUT_S)

    def get_available(self, path: str, **params: Any) -> httpx.Response:
        """GET ``path``, asked again while it answers 503 + Retry-After (:func:`until_available`)."""
        return until_available(lambda: self.get(path, **params))

    def metrics_text(self) -> str:
        response = self.get("/metrics")
        response.raise_for_status()
        return response.text

    def get_json(self, path: str, **params: Any) -> Any:
        """GET ``path`` (with query ``params``) and return the decoded JSON; raises on a status >= 400 (a 503 +
        Retry-After is asked again first: :func:`until_available`)."""
        response = self.get_available(path, **params)
        response.raise_for_status()
        return response.json()

    def status_and_json(self, path: str) -> tuple[int, Any]:
        """GET ``path``; ``(status, JSON body)``, also for error statuses."""
        response = self.get(path)
        return response.status_code, response.json()

    def post_json(self, path: str, body: Any) -> Any:
        """POST ``body`` as JSON and return the decoded answer; raises on a status >= 400 (a 503 + Retry-After is
        asked again first: :func:`until_available`)."""
        self.until_listening()
        response = until_available(
            lambda: httpx.post(
                f"{self.url}{path}",
                content=json.dumps(body),
                headers={"content-type": "application/json"},
                timeout=HTTP_TIMEOUT_S,
            )
        )
        response.raise_for_status()
        return response.json()

    def issue(self, scheme: str, count: int = 1, **options: Any) -> list[str]:
        """``count`` fresh IDs of ``scheme`` from ``GET /v1/ids/{scheme}``, in their canonical form."""
        return list(self.get_json(f"/v1/ids/{scheme}", count=count, **options)["ids"])

    def decode(self, scheme: str, text: str) -> dict[str, Any]:
        """The server's own decode object for ``text`` (``GET /v1/decode/{scheme}/{id}``)."""
        return dict(self.get_json(f"/v1/decode/{scheme}/{urllib.parse.quote(text, safe='')}"))

    def __repr__(self) -> str:
        return f"Server({self.url}, pid {self.proc.pid}, {'running' if self.running else 'stopped'})"


def _unused(path: Path) -> Path:
    """``path``, or ``<stem>-2<suffix>``, ``-3``...: the first that does not exist (a restart on the same port
    keeps the earlier log)."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


@contextlib.contextmanager
def running_server(
    workdir: Path, env: Mapping[str, str] | None = None, *args: str, ready: bool = True, **kwargs: Any
) -> Iterator[Server]:
    """A started :class:`Server`, ready (``/readyz`` and every worker up; ``ready=False``: ``/healthz``), stopped
    on exit."""
    server = Server(workdir, env, *args, **kwargs)
    try:
        if ready:
            server.wait_ready()
        else:
            server.wait("/healthz")
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def serve_process(state_dir: Path, *args: str, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """A ready ``idmint serve`` using ``state_dir`` itself as its state dir; yields its base URL."""
    with running_server(state_dir, {"IDMINT_STATE_DIR": str(state_dir), **(env or {})}, *args) as server:
        yield server.url
