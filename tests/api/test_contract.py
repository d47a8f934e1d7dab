"""The contract tells the truth: schemathesis drives every operation of ``/openapi.json`` against a real
``idmint serve`` and checks that no answer is a server error and that every status code, content type and body is
the one documented. Also: every error is JSON, counted, and carries ``nosniff``; unknown methods are counted as
``other``."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import Server

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    replica = Server(tmp_path_factory.mktemp("contract"), {})
    try:
        replica.wait("/readyz")
        yield replica
    finally:
        replica.stop()


MAX_EXAMPLES = 40
"""Examples per operation: inputs enough to reach every documented answer of each."""
UNAUTHENTICATED_EXAMPLES = 10
"""Examples per operation without an API key: every operation outside the public scopes answers 401 before it reads
its input (the same rule whatever the input), and the public ones are driven with :data:`MAX_EXAMPLES` elsewhere."""
KEYED_PHASES = "examples,fuzzing,stateful"
"""Phases of the runs with API keys on: all but ``coverage``, whose boundary inputs (every parameter's edges and
wrong types) are the same with or without a key and are driven by the run without keys; a key decides who may call
an operation, before its input is read, not which input is valid."""


def schemathesis(
    url: str,
    report: Path,
    *extra: str,
    examples: int = MAX_EXAMPLES,
    phases: str = "examples,coverage,fuzzing,stateful",
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{url}/openapi.json",
        "--checks",
        CHECKS,
        "--max-examples",
        str(examples),
        "--phases",
        phases,
        "--seed",
        "13",
        "--no-color",
        "--generation-database",
        "none",
        "--request-timeout",
        "30",
        "--report",
        "junit",
        "--report-junit-path",
        str(report),
        # Draining stops the server issuing for good (tests/test_admin_replicas.py covers it), and every later
        # operation would meet a drained node.
        "--exclude-path",
        "/v1/admin/drain",
        *extra,
    ]
    # Run in the report's directory: schemathesis keeps a cache (.schemathesis/) in its working directory.
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=report.parent)


def summary(out: str) -> str:
    return "\n".join(line for line in out.splitlines() if "generated" in line or "passed" in line or "❌" in line)


@pytest.mark.integration
def test_schemathesis_finds_nothing_over_every_operation(server: Server, tmp_path: Path) -> None:
    done = schemathesis(server.url, tmp_path / "junit.xml")
    print(summary(done.stdout))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Selected: " in done.stdout and "Tested: " in done.stdout


@pytest.mark.integration
def test_schemathesis_with_api_keys_on(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[key]]\nname = "all"\nsha256 = "{hashlib.sha256(b"contract-key").hexdigest()}"\n'
        'scopes = ["issue", "stream", "decode", "sequences", "admin", "metrics"]\n'
    )
    replica = Server(tmp_path, {"IDMINT_API_KEYS_FILE": str(keys), "IDMINT_PUBLIC_SCOPES": "decode"})
    try:
        replica.wait("/readyz")
        for headers, examples in (
            ([], UNAUTHENTICATED_EXAMPLES),
            (["-H", "Authorization: Bearer contract-key"], MAX_EXAMPLES),
        ):
            done = schemathesis(replica.url, tmp_path / "junit.xml", *headers, examples=examples, phases=KEYED_PHASES)
            print(summary(done.stdout))
            assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    finally:
        replica.stop()


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/v1/ids/nope", None, 404),
        ("GET", "/v1/ids/wiji?count=0", None, 422),
        ("GET", "/v1/ids/wiji?count=%C2%B2", None, 422),
        ("POST", "/v1/decode", b"\xff\xfe", 422),
        ("POST", "/v1/decode", b'{"text": 3}', 422),
        ("GET", "/nowhere", None, 404),
        ("DELETE", "/healthz", None, 405),
    ],
)
def test_every_error_is_json_with_nosniff(
    server: Server, method: str, path: str, body: bytes | None, status: int
) -> None:
    r = httpx.request(
        method,
        f"{server.url}{path}",
        content=body,
        headers={"content-type": "application/json"} if body is not None else {},
    )
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert isinstance(json.loads(r.text)["detail"], str)


def test_json_successes_carry_nosniff(server: Server) -> None:
    for path in ("/v1/ids/wiji", "/v1/ids/wiji?count=3&format=uuid", "/v1/schemes", "/healthz", "/readyz"):
        r = httpx.get(f"{server.url}{path}")
        assert r.status_code == 200 and r.headers["x-content-type-options"] == "nosniff", path


def test_unknown_methods_are_counted_as_other(server: Server) -> None:
    for method in ("BREW", "PROPFIND", "X-Y"):
        httpx.request(method, f"{server.url}/healthz")
    text = httpx.get(f"{server.url}/metrics").text
    methods = {
        line.split('method="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("idmint_requests_total{")
    }
    assert "other" in methods and not methods - {
        "GET",
        "HEAD",
        "POST",
        "PUT",
        "PATCH",
        "DELETE",
        "OPTIONS",
        "CONNECT",
        "TRACE",
        "other",
    }


def test_an_internal_error_is_json_and_counted_on_both_paths(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from tests.helpers import make_settings

    app = create_app(make_settings(tmp_path))
    with TestClient(app, raise_server_exceptions=False) as client:
        node = app.app.state.node

        async def broken(*args: object, **kwargs: object) -> None:
            raise RuntimeError("injected fault")

        def broken_now(*args: object, **kwargs: object) -> None:
            raise RuntimeError("injected fault")

        node.issuers["wiji"].issue = broken  # the FastAPI route's
        node.issuers["wiji"].issue_now = broken_now  # the hot route's
        for method in ("GET", "POST"):  # GET: the fast path; POST: the FastAPI route
            r = client.request(method, "/v1/ids/wiji")
            assert r.status_code == 500 and r.json() == {"detail": "internal error"}, (method, r.text)
            assert r.headers["content-type"] == "application/json"
            sample = node.metrics.registry.get_sample_value(
                "idmint_requests_total", {"route": "/v1/ids/{scheme}", "method": method, "status": "500"}
            )
            assert sample == 1, method
