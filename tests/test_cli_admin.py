"""``idmint admin claims|drain|revoke`` against a real ``idmint serve`` (embedded backend)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.server import run_idmint, serve_process

pytestmark = pytest.mark.integration  # a real server process


def admin(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IDMINT_SERVER": url}
    return run_idmint(["admin", *args], env=env, timeout=60)


def test_admin_commands_list_revoke_and_drain(tmp_path: Path) -> None:
    with serve_process(tmp_path / "state") as url:
        pid = httpx.get(f"{url}/v1/admin/claims").json()["claims"][0]["owner"]["pid"]
        listed = admin(url, "claims")
        assert listed.returncode == 0, listed.stderr
        claims = json.loads(listed.stdout)["claims"]
        assert {c["scheme"] for c in claims} >= {"eight-byte", "snowflake", "siq", "muid", "hlc-ulid"}
        assert {c["owner"]["pid"] for c in claims} == {pid}
        eight = next(c for c in claims if c["scheme"] == "eight-byte")
        refused = admin(url, "revoke", "eight-byte", str(eight["identity"]))
        assert refused.returncode == 1 and "HTTP 409" in refused.stderr and "OS file locks" in refused.stderr
        bad = admin(url, "revoke", "eight-byte", "9999")
        assert bad.returncode == 1 and "HTTP 422" in bad.stderr and "0..2047" in bad.stderr
        drained = admin(url, "drain")
        assert drained.returncode == 0, drained.stderr
        assert json.loads(drained.stdout)["status"] == "drained"
        assert httpx.get(f"{url}/readyz").json()["status"] == "draining"
        assert httpx.get(f"{url}/v1/ids/eight-byte").status_code == 503
        assert json.loads(admin(url, "claims").stdout)["claims"] == []
