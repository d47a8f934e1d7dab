"""``idmint sequence`` as a real subprocess, sharing the state directory with a running server's storage."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from app.sequences.template import Template
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


def run(tmp_path: Path, *args: str) -> Any:
    r = idmint(tmp_path, "sequence", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_business_settings_alter_setval_delete_and_parse(tmp_path: Path) -> None:
    created = run(
        tmp_path, "create", "inv", "--reset", "yearly", "--template",
        "INV-{yyyy}-{seq:05}{check}", "--check-digit", "mod97", "--increment", "3",
    )  # fmt: skip
    assert created == {
        "name": "inv", "start": 1, "cache": 1000, "next": 1, "increment": 3, "reset": "yearly",
        "template": "INV-{yyyy}-{seq:05}{check}", "check_digit": "mod97", "created": True,
    }  # fmt: skip
    reserved = run(tmp_path, "range", "inv", "-n", "4")
    assert reserved["first"] == 1 and reserved["last"] == 10 and reserved["increment"] == 3
    year = reserved["period"][:4]
    text = Template.compile("INV-{yyyy}-{seq:05}{check}", "yearly", "mod97").render(date(int(year), 1, 1), 4)
    parsed = run(tmp_path, "parse", "inv", text)
    assert parsed["value"] == 4 and parsed["state"] == "reserved"
    altered = run(tmp_path, "alter", "inv", "--template", "INV-{yyyy}-{seq:07}{check}")
    assert altered["template"] == "INV-{yyyy}-{seq:07}{check}"
    r = idmint(tmp_path, "sequence", "alter", "inv", "--template", "INV-{yyyy}-{seq}1{check}")
    assert r.returncode != 0 and "could render a number as" in r.stderr
    assert run(tmp_path, "setval", "inv", "1000")["next"] == 1000
    r = idmint(tmp_path, "sequence", "setval", "inv", "999")
    assert r.returncode != 0 and "forward only" in r.stderr
    assert run(tmp_path, "delete", "inv") == {"name": "inv", "deleted": True, "generation": 1}
    r = idmint(tmp_path, "sequence", "show", "inv")
    assert r.returncode != 0 and "no sequence named 'inv'" in r.stderr


def test_gapless_reserve_commit_void_and_audit(tmp_path: Path) -> None:
    run(tmp_path, "create", "g", "--mode", "gapless", "--template", "G{seq:03}")
    first = run(tmp_path, "reserve", "g", "--ttl", "120")
    assert first["value"] == 1 and first["text"] == "G001"
    second = run(tmp_path, "reserve", "g")
    assert run(tmp_path, "commit", "g", second["reservation"])["state"] == "committed"
    assert run(tmp_path, "void", "g", first["reservation"], "--reason", "test")["state"] == "voided"
    r = idmint(tmp_path, "sequence", "commit", "g", first["reservation"])
    assert r.returncode != 0 and "it was voided" in r.stderr
    r = idmint(tmp_path, "sequence", "range", "g")
    assert r.returncode != 0 and "gapless" in r.stderr
    events = run(tmp_path, "audit", "g")["events"]
    assert [e["event"] for e in events] == ["reserve", "reserve", "commit", "void"]
    assert all("(idmint sequence)" in e["node"] for e in events) and events[3]["reason"] == "test"

    third = run(tmp_path, "reserve", "g")
    report = run(tmp_path, "holes", "g")
    assert report["state"] == "never" and report["holes"] == []
    assert [o["reservation"] for o in report["outstanding"]] == [third["reservation"]]
    assert report["totals"] == {"committed": 1, "holes": 0, "outstanding": 1}
    r = idmint(tmp_path, "sequence", "delete", "g")
    assert r.returncode != 0 and "1 reservation(s) open" in r.stderr and third["reservation"] in r.stderr
    assert run(tmp_path, "delete", "g", "--force")["voided"] == 1
