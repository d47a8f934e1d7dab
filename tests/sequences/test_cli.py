"""``idmint sequence`` as a real subprocess, sharing the state directory with a running server's storage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import idmint

pytestmark = pytest.mark.integration  # the CLI as a process


def test_create_range_show(tmp_path: Path) -> None:
    r = idmint(tmp_path, "sequence", "create", "orders", "--start", "10", "--cache", "5")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"name": "orders", "start": 10, "cache": 5, "next": 10, "created": True}
    r = idmint(tmp_path, "sequence", "range", "orders", "-n", "1000")
    assert json.loads(r.stdout) == {"name": "orders", "first": 10, "last": 1009, "count": 1000}
    r = idmint(tmp_path, "sequence", "range", "orders", "-n", str(2**40))
    assert json.loads(r.stdout)["last"] == 1009 + 2**40
    assert json.loads(idmint(tmp_path, "sequence", "show", "orders").stdout)["next"] == 1010 + 2**40


def test_errors_are_clear(tmp_path: Path) -> None:
    r = idmint(tmp_path, "sequence", "range", "nope")
    assert r.returncode != 0 and "no sequence named 'nope'" in r.stderr
    r = idmint(tmp_path, "sequence", "range", "Bad")
    assert r.returncode != 0 and "[a-z0-9_-]{1,64}" in r.stderr
    r = idmint(tmp_path, "sequence", "range", "orders", "-n", str(2**40 + 1))
    assert r.returncode != 0 and "1<=x<=1099511627776" in r.stderr
    idmint(tmp_path, "sequence", "create", "edge", "--start", str(2**63 - 3))
    r = idmint(tmp_path, "sequence", "range", "edge", "-n", "4")
    assert r.returncode != 0 and "2**63-1" in r.stderr
