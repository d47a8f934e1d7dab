"""A pre-imported fork server ("zygote") for the tests' ``idmint serve`` starts: the idea of multiprocessing's
forkserver start method. A fresh ``idmint serve`` spends most of its start-up CPU importing the app; the zygote has
imported it once and forks a child per start, which then runs the same entry point a fresh process would.

* :func:`fork_server` is this pytest process's zygote, started on first use (one per process: each pytest-xdist
  worker has its own). It has imported :data:`PRELOAD` (no app built, no event loop, no thread) and otherwise only
  waits on its socket and on its children's pidfds.
* :meth:`ForkServer.start` sends a :class:`Start` (argv, environment, cwd, log path, open-file limit); the zygote
  forks; the child sets the environment, cwd, a session of its own (``setsid``), ``RLIMIT_NOFILE``, stdin from
  /dev/null or a file, stdout to the log, stderr to the log or a file of its own, then returns to this module's
  ``__main__`` level, which runs the click entry point (``idmint`` or ``uvicorn``) and exits through the
  interpreter's own shutdown (atexit handlers, non-daemon threads, flushed streams), as a fresh process would.
* The zygote reaps its children and reports each exit status; :class:`ForkedProcess` is the test side's handle,
  shaped like :class:`subprocess.Popen` (``pid``, ``poll``, ``returncode``, ``wait``, ``send_signal``,
  ``terminate``, ``kill``). Signals go by PID straight from the test process (same user), as for an exec'd child.
* ``tests.support.server.run_idmint`` is :func:`subprocess.run` for a one-shot ``idmint ...`` command (``idmint
  storage fence``, ``idmint decode``...): forked the same way, stdout and stderr to files of their own.
* When this pytest process ends (or dies), the zygote reads end-of-file on its socket, SIGKILLs every child's
  process group, reaps them and exits.

:func:`can_fork` says when a start must be a fresh exec instead (``tests/support/server.py`` falls back to
:class:`subprocess.Popen`): ``IDMINT_TEST_FORK=0``; more than one uvicorn worker; an environment that differs from the
zygote's (as started) in anything but ``IDMINT_*`` settings, ``PYTHONUNBUFFERED`` and ``PYTEST_CURRENT_TEST`` (a
variable read at import time, by the app or a library, would keep the zygote's value: ``PROMETHEUS_MULTIPROC_DIR``,
``LD_PRELOAD`` and libfaketime's ``FAKETIME*``, ``TZ``...).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import importlib.util
import io
import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from typing import Any

PRELOAD = (
    *("app.cli", "app.main", "app.serving", "app.logs", "app.metrics", "uvicorn", "uvicorn.main"),
    *("app.storage.etcd", "app.storage.postgres", "app.storage.mysql"),
)
"""What the zygote imports before it forks: the ``idmint serve`` and ``uvicorn`` entry points, the app factory's
module tree, and the storage backends a server or an ``idmint storage ...`` command opens on demand (with their
clients: httpx, psycopg, aiomysql). None of them reads an ``IDMINT_*`` variable at import (what they read of the
rest of the environment is the zygote's, which a forked child's equals); prometheus-client is imported in its
single-process mode, the mode of one worker without ``PROMETHEUS_MULTIPROC_DIR`` (the starts that fork)."""

ENTRY_POINTS = ("idmint", "uvicorn")
"""``idmint``: ``app.cli:main`` (``idmint serve ...``); ``uvicorn``: ``uvicorn.main:main`` (``python -m uvicorn``)."""

SWITCH = "IDMINT_TEST_FORK"
"""``IDMINT_TEST_FORK=0`` starts every server by exec, as without a fork server."""

MESSAGE_MAX = 1 << 20
"""The largest message on the socket (a start's environment and argv), in bytes."""

SETTINGS_PREFIX = "IDMINT_"
"""Variables that may differ between the zygote and a child: idmint reads its settings when it builds them, never
at import."""


def enabled() -> bool:
    """Whether servers may be forked (``IDMINT_TEST_FORK`` is not ``0``)."""
    return os.environ.get(SWITCH, "1") != "0"


UNBUFFERED = "PYTHONUNBUFFERED"
"""May differ between the zygote and a child too: the child sets its streams' buffering by it."""
CURRENT_TEST = "PYTEST_CURRENT_TEST"
"""May differ too: pytest sets it for each test; nothing reads it at import."""


def _import_time_environment(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith(SETTINGS_PREFIX) and k not in (UNBUFFERED, CURRENT_TEST)}


def can_fork(env: Mapping[str, str], base_env: Mapping[str, str], workers: int) -> bool:
    """Whether a server with environment ``env`` and ``workers`` uvicorn workers may be forked from a zygote
    started with ``base_env``: the switch is on, one worker (uvicorn's supervisor spawns fresh workers and
    prometheus-client's multiprocess mode is chosen at import), and ``env`` equals ``base_env`` but for ``IDMINT_*``
    settings."""
    return enabled() and workers == 1 and _import_time_environment(env) == _import_time_environment(base_env)


@dataclasses.dataclass(frozen=True)
class Start:
    """One start: ``entry`` (one of :data:`ENTRY_POINTS`) with ``argv`` (``sys.argv``, program name first),
    environment ``env`` (the whole of it), working directory ``cwd``, stdout to ``log`` (truncated), stderr to
    ``stderr`` (truncated) or None for ``log`` too, stdin from the file ``stdin`` or None for /dev/null,
    ``open_files``: ``RLIMIT_NOFILE`` (soft and hard) or None for the zygote's."""

    entry: str
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    log: str
    open_files: int | None = None
    stderr: str | None = None
    stdin: str | None = None


# -- the test side -------------------------------------------------------------------------------------------------


class ForkServerError(RuntimeError):
    """The zygote refused a start or is gone."""


class ForkedProcess:
    """A server forked by the zygote, shaped like :class:`subprocess.Popen`: the zygote is its parent and reports
    its exit status, ``returncode`` as Popen's (negative: the signal that ended it)."""

    def __init__(self, server: ForkServer, pid: int, args: Sequence[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = list(args)

    @property
    def returncode(self) -> int | None:
        return self._server.exit_status(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status, once the zygote reaped the process; :class:`subprocess.TimeoutExpired` after
        ``timeout`` seconds (None: no limit)."""
        return self._server.wait_exit(self.pid, self.args, timeout)

    def send_signal(self, sig: int) -> None:
        """``sig`` to the PID, unless its exit was already reported."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"ForkedProcess(pid {self.pid}, returncode {self.returncode})"


class ForkServer:
    """The test side of one zygote: starts it, sends :class:`Start` requests, and records the exit statuses it
    reports (a reader thread)."""

    def __init__(self, cwd: str, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        """The zygote's environment (see :func:`can_fork`)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        with theirs:
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.support.forkserver", str(theirs.fileno())],
                    cwd=cwd,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,
                )
            except BaseException:
                ours.close()
                raise
        self._cond = threading.Condition()
        self._exits: dict[int, int] = {}
        self._replies: dict[int, dict[str, Any]] = {}
        self._next_id = 0
        self._gone = False
        self._send_lock = threading.Lock()
        threading.Thread(target=self._read, name="forkserver-reader", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(MESSAGE_MAX)
            except OSError:
                data = b""
            with self._cond:
                if not data:
                    self._gone = True
                    self._cond.notify_all()
                    return
                message = json.loads(data)
                if "exit" in message:
                    self._exits[int(message["exit"])] = int(message["returncode"])
                else:
                    self._replies[int(message["id"])] = message
                self._cond.notify_all()

    def start(self, start: Start) -> ForkedProcess:
        """Fork a child that runs ``start``; its handle once the zygote answered with its PID."""
        with self._cond:
            self._next_id += 1
            request_id = self._next_id
        payload = json.dumps({"id": request_id, **dataclasses.asdict(start)}).encode()
        with self._send_lock:
            self._sock.send(payload)
        with self._cond:
            self._cond.wait_for(lambda: request_id in self._replies or self._gone)
            reply = self._replies.pop(request_id, None)
        if reply is None:
            raise ForkServerError(f"the fork server exited with {self._proc.wait()}")
        if "error" in reply:
            raise ForkServerError(reply["error"])
        return ForkedProcess(self, int(reply["pid"]), start.argv)

    def exit_status(self, pid: int) -> int | None:
        with self._cond:
            return self._exits.get(pid)

    def wait_exit(self, pid: int, args: Sequence[str], timeout: float | None) -> int:
        with self._cond:
            if not self._cond.wait_for(lambda: pid in self._exits or self._gone, timeout):
                raise subprocess.TimeoutExpired(list(args), timeout or 0.0)
            if pid not in self._exits:
                raise ForkServerError(f"the fork server exited before process {pid}")
            return self._exits[pid]

    @property
    def pid(self) -> int:
        """The zygote's PID."""
        return self._proc.pid

    def close(self) -> None:
        """End the zygote: it SIGKILLs every child's process group it still has, reaps them and exits."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._proc.wait()


_SERVER: ForkServer | None = None
_SERVER_LOCK = threading.Lock()


def fork_server(cwd: str, env: Mapping[str, str]) -> ForkServer:
    """This process's zygote (started with ``cwd`` and ``env`` on first use)."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None:
            _SERVER = ForkServer(cwd, env)
        return _SERVER


def fork_server_environment(default: Mapping[str, str]) -> dict[str, str]:
    """The environment this process's zygote was started with; ``default`` (what it would be started with) when it
    is not running."""
    with _SERVER_LOCK:
        return dict(default if _SERVER is None else _SERVER.env)


def close_fork_server() -> None:
    """End this process's zygote, if started (at exit, after the servers' own stop)."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is not None:
            _SERVER.close()
            _SERVER = None


# -- the zygote ------------------------------------------------------------------------------------------------------


def _serve(sock: socket.socket) -> Start | None:
    """The zygote's loop: fork a child per request, report each child's exit. Returns the :class:`Start` to run in
    a child; None in the zygote once the test side is gone (after killing and reaping its children)."""
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    pidfds: dict[int, int] = {}  # child PID -> its pidfd, registered in the selector
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj is sock:
                    data = sock.recv(MESSAGE_MAX)
                    if not data:
                        return None
                    request = json.loads(data)
                    request_id = request.pop("id")
                    start = Start(**request)
                    try:
                        pid = os.fork()
                    except OSError as exc:
                        sock.send(json.dumps({"id": request_id, "error": repr(exc)}).encode())
                        continue
                    if pid == 0:
                        selector.close()
                        for fd in pidfds.values():
                            os.close(fd)
                        sock.close()
                        pidfds.clear()
                        return start
                    pidfd = os.pidfd_open(pid)
                    pidfds[pid] = pidfd
                    selector.register(pidfd, selectors.EVENT_READ, pid)
                    sock.send(json.dumps({"id": request_id, "pid": pid}).encode())
                else:
                    pid = key.data
                    selector.unregister(key.fileobj)
                    os.close(pidfds.pop(pid))
                    _, status = os.waitpid(pid, 0)
                    sock.send(json.dumps({"exit": pid, "returncode": os.waitstatus_to_exitcode(status)}).encode())
    finally:
        if pidfds:  # the zygote only: a child cleared its copy
            for pid in pidfds:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            for pid, fd in pidfds.items():
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                os.close(fd)


def _become(start: Start) -> None:
    """In the child: what exec'ing ``start`` would have set up."""
    os.setsid()
    if start.open_files is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (start.open_files, start.open_files))
    os.chdir(start.cwd)
    source = os.open(os.devnull if start.stdin is None else start.stdin, os.O_RDONLY)
    log = os.open(start.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = log if start.stderr is None else os.open(start.stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd, target in ((source, 0), (log, 1), (err, 2)):
        os.dup2(fd, target)
    for fd in {source, log, err}:
        os.close(fd)
    os.environ.clear()
    os.environ.update(start.env)
    # The streams as a fresh interpreter's on files: write-through under PYTHONUNBUFFERED; else stdout buffered,
    # stderr line-buffered.
    unbuffered = bool(start.env.get(UNBUFFERED))
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=False, write_through=unbuffered)
    if isinstance(sys.stderr, io.TextIOWrapper):
        sys.stderr.reconfigure(line_buffering=not unbuffered, write_through=unbuffered)
    sys.argv = list(start.argv)
    sys.modules["__main__"] = _fresh_main(start)


def _fresh_main(start: Start) -> types.ModuleType:
    """The ``__main__`` module an exec'd process would have (multiprocessing's spawn start method re-imports it in
    its children: a console script by path, ``python -m uvicorn`` not at all); the console script's directory first
    on ``sys.path``, as the interpreter puts it."""
    main = types.ModuleType("__main__")
    if start.entry == "idmint":
        script = os.path.abspath(start.argv[0])
        sys.path[0] = os.path.dirname(script)
        main.__file__ = script
    else:
        main.__spec__ = importlib.util.find_spec(f"{start.entry}.__main__")
        main.__file__ = main.__spec__.origin if main.__spec__ is not None else None
    return main


def _run(start: Start) -> None:
    """Run ``start``'s entry point; it ends with SystemExit, as the console script would."""
    if start.entry == "idmint":
        from app.cli import main as idmint_main

        idmint_main(prog_name="idmint")
    elif start.entry == "uvicorn":
        from uvicorn.main import main as uvicorn_main

        uvicorn_main(prog_name="python -m uvicorn")
    else:
        raise SystemExit(f"unknown entry point {start.entry!r}")


ZYGOTE_NAME, CHILD_NAME = b"idmint-zygote", b"idmint-forked"
"""The zygote's and its children's process names (``/proc/PID/comm``: what ``ps``, ``top`` and process accounting
show), so that a run's CPU can be told apart from its pytest workers' and its exec'd commands' (all ``python``)."""


def _set_process_name(name: bytes) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)


PR_SET_NAME = 15


def _main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ends on end-of-file from the test side, not on ^C
    _set_process_name(ZYGOTE_NAME)
    for name in PRELOAD:
        __import__(name)
    gc.freeze()  # what was imported stays out of the children's collections (and their pages shared)
    start = _serve(socket.socket(fileno=fd))
    if start is None:
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _set_process_name(CHILD_NAME)
    _become(start)
    _run(start)


if __name__ == "__main__":
    _main(int(sys.argv[1]))
