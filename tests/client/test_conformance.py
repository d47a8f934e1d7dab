"""Each client (Python, TypeScript, Go) passes every case of the conformance suite (``clients/conformance``), run by
``scripts/test-clients.sh`` as a user would: the client's own checks (TypeScript: tsc, lint, Node's test runner;
Go: go vet, go test), then the driver with real idmint servers, a real etcd and the fault proxy."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.support.server import REPO

pytestmark = pytest.mark.integration  # real idmint serve, etcd, node and go

SUITE_GUARD_S = 1800
"""A guard against a hung run (its output is then shown), not a time budget."""


@pytest.mark.parametrize("client", ["python", "typescript", "go"])
def test_the_client_passes_every_conformance_case(client: str) -> None:
    cases = sum(len(json.loads(p.read_text())) for p in (REPO / "clients" / "conformance" / "cases").glob("*.json"))
    assert cases >= 40
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "test-clients.sh"), client],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=SUITE_GUARD_S,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert re.search(rf"^{client}: {cases} passed, 0 failed$", done.stdout, re.MULTILINE), output[-6000:]
