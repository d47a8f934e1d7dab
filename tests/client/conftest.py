"""Fixtures of the client tests: real ``idmint serve`` processes on free loopback ports, each with its own state dir.

The client (``clients/python``, distribution ``idmint-client``) is installed editable by ``scripts/test.sh``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

try:
    import idmint_client  # noqa: F401
except ImportError:  # pragma: no cover - a setup error, not a skip
    pytest.fail(
        "idmint_client is not installed: run scripts/test.sh, or .venv/bin/pip install -e clients/python", pytrace=False
    )

from tests.helpers import Replica


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    """One ready ``idmint serve`` (one worker, embedded lease backend) shared by a test module."""
    replica = Replica(tmp_path_factory.mktemp("server"), {})
    try:
        replica.wait("/readyz")
        yield replica
    finally:
        replica.stop()


@pytest.fixture(scope="module")
def scheme_names(server: Replica) -> list[str]:
    """Every scheme the server serves, from its catalogue (the set grows: tests take it from here)."""
    return [s["name"] for s in httpx.get(f"{server.url}/v1/schemes", timeout=10).json()["schemes"]]


def replica_on(tmp_path: Path, env: dict[str, str], port: int | None = None) -> Replica:
    """A Replica, optionally on a given port (a restart on the address the client knows)."""
    replica = Replica.__new__(Replica)
    if port is None:
        Replica.__init__(replica, tmp_path, env)
        return replica
    import os
    import subprocess
    import sys

    replica.port = port
    replica.url = f"http://127.0.0.1:{port}"
    replica.log_path = tmp_path / f"replica-{port}-restart.log"
    replica._log = open(replica.log_path, "wb")  # noqa: SIM115 -- closed by stop()
    full_env = {**os.environ, "IDMINT_STATE_DIR": str(tmp_path / f"state-{port}-restart"), **env}
    replica.proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=full_env,
        stdout=replica._log,
        stderr=subprocess.STDOUT,
    )
    return replica


def issued_total(replica: Replica, scheme: str) -> float:
    """``idmint_ids_issued_total{scheme=...}`` of a replica."""
    for line in replica.get("/metrics").text.splitlines():
        if line.startswith("idmint_ids_issued_total{") and f'scheme="{scheme}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
