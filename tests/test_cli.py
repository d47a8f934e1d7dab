"""The idmint command, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.server import run_idmint

pytestmark = pytest.mark.integration  # the idmint command as a real subprocess


def idmint(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "IDMINT_STATE_DIR": str(tmp_path)}
    return run_idmint(args, env=env, timeout=60)


def test_mint_writes_unique_ids_that_decode(tmp_path: Path) -> None:
    r = idmint(tmp_path, "mint", "wiji", "-n", "100000", "--format", "uuid")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 100_000 and len(set(lines)) == 100_000
    d = idmint(tmp_path, "decode", lines[-1])
    assert d.returncode == 0, d.stderr
    assert json.loads(d.stdout)["candidates"][0]["scheme"] == "wiji"


def test_mint_options_and_decode_with_scheme(tmp_path: Path) -> None:
    r = idmint(tmp_path, "mint", "eight-byte", "-n", "3", "--mode", "time_sequential", "--format", "decimal")
    assert r.returncode == 0, r.stderr
    d = idmint(tmp_path, "decode", r.stdout.split()[0], "--scheme", "eight-byte")
    assert json.loads(d.stdout)["fields"]["mode"] == "time_sequential"


def test_errors_are_clear(tmp_path: Path) -> None:
    r = idmint(tmp_path, "mint", "uuid7")
    assert r.returncode != 0 and "unknown scheme 'uuid7'" in r.stderr
    r = idmint(tmp_path, "decode", "definitely-not-an-id")
    assert r.returncode != 0 and "not an ID of any scheme" in r.stderr
    env_bad = run_idmint(
        ["mint", "wiji"], env={**os.environ, "IDMINT_CLUSTER_ID": "17", "IDMINT_STATE_DIR": str(tmp_path)}, timeout=60
    )
    assert env_bad.returncode != 0 and "cluster_id must be in 0..15" in env_bad.stderr
