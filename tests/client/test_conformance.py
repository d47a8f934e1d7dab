"""Each client (Python, TypeScript, Go) passes every case of the conformance suite (``clients/conformance``), run by
``scripts/test-clients.sh`` as a user would: the clients' own checks (TypeScript: tsc, lint, Node's test runner;
Go: go vet, go test), then the driver with real idmint servers, a real etcd and the fault proxy. The script runs
once for all three clients (one set of servers, started once); each client's result is its own test."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass

import pytest

from tests.support.server import REPO

pytestmark = pytest.mark.integration  # real idmint serve, etcd, node and go

SUITE_GUARD_S = 2700
"""A guard against a hung run (its output is then shown), not a time budget."""
CLIENTS = ("python", "typescript", "go")


@dataclass
class ConformanceRun:
    """The output of one ``scripts/test-clients.sh`` run for every client, and its exit status."""

    returncode: int
    stdout: str
    output: str

    def about(self, client: str) -> str:
        """The lines naming ``client`` (its result, its failed cases), or the run's tail when there are none."""
        lines = [line for line in self.stdout.splitlines() if line.startswith(f"{client}: ")]
        return "\n".join(lines)[-6000:] if lines else self.output[-6000:]


@pytest.fixture(scope="module")
def conformance_run() -> ConformanceRun:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "test-clients.sh"), *CLIENTS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SUITE_GUARD_S,
    )
    return ConformanceRun(done.returncode, done.stdout, done.stdout + done.stderr)


@pytest.mark.parametrize("client", CLIENTS)
def test_the_client_passes_every_conformance_case(client: str, conformance_run: ConformanceRun) -> None:
    cases = sum(len(json.loads(p.read_text())) for p in (REPO / "clients" / "conformance" / "cases").glob("*.json"))
    assert cases >= 40
    result = re.search(rf"^{client}: {cases} passed, 0 failed$", conformance_run.stdout, re.MULTILINE)
    assert result, conformance_run.about(client)
