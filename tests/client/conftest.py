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

from tests.support.server import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One ready ``idmint serve`` (one worker, embedded lease backend) shared by a test module."""
    replica = Server(tmp_path_factory.mktemp("server"), {})
    try:
        replica.wait("/readyz")
        yield replica
    finally:
        replica.stop()


@pytest.fixture(scope="module")
def scheme_names(server: Server) -> list[str]:
    """Every scheme the server serves, from its catalogue (the set grows: tests take it from here)."""
    return [s["name"] for s in httpx.get(f"{server.url}/v1/schemes", timeout=10).json()["schemes"]]


def replica_on(tmp_path: Path, env: dict[str, str], port: int | None = None) -> Server:
    """A started :class:`Server` (not waited for), optionally on a given port: a restart on the address the
    client knows, with a state dir of its own."""
    if port is not None and "IDMINT_STATE_DIR" not in env:
        env = {**env, "IDMINT_STATE_DIR": str(tmp_path / f"state-{port}-restart")}
    return Server(tmp_path, env, port=port)


def issued_total(replica: Server, scheme: str) -> float:
    """``idmint_ids_issued_total{scheme=...}`` of a replica."""
    for line in replica.get("/metrics").text.splitlines():
        if line.startswith("idmint_ids_issued_total{") and f'scheme="{scheme}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
