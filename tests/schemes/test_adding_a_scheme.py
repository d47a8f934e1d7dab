"""docs/development.md "Adding a scheme": its example module, run as printed, registered in-process, issues and
decodes.

The module is the docs' Python block itself (not a copy), so the docs cannot drift from what works.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import app.schemes
from app.errors import InvalidIdError
from app.schemes import get_scheme, schemes
from app.schemes.base import Scheme
from tests.helpers import FakeClock, running_app

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "development.md"
NOW_NS = 1_720_000_000_123_456_789
NOW_MS = NOW_NS // 1_000_000
RANDOM = bytes.fromhex("a1b2c3d4e5f60718")


def _example_module() -> types.ModuleType:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("\n## Adding a scheme\n", 1)[1].split("\n## ", 1)[0]
    source = re.search(r"```python\n(.*?)```", section, re.S)
    assert source, "docs/development.md's 'Adding a scheme' has no python block"
    module = types.ModuleType("tiny")
    exec(compile(source.group(1), f"{GUIDE}:Adding a scheme", "exec"), module.__dict__)
    return module


TINY = _example_module()


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Scheme:
    """The example scheme in the registry (this test only): what its one registry line does."""
    monkeypatch.setattr(app.schemes, "_SCHEMES", {**schemes(), "tiny": TINY.SCHEME})
    return get_scheme("tiny")


def test_the_example_issues_and_round_trips(registered: Scheme) -> None:
    clock = FakeClock.from_ns(NOW_NS)
    generator = registered.new_generator(None, [], -1, clock, lambda n: RANDOM[:n])
    batch = generator.generate(3)
    lines = batch.encode("canonical").decode().splitlines()
    assert lines == [f"{NOW_MS:012x}{sequence:04x}a1b2c3d4e5f60718" for sequence in range(3)]
    assert [registered.parse(line) for line in lines] == batch.values()
    assert registered.fields(batch.values()[2]) == {"timestamp_ms": NOW_MS, "sequence": 2, "random": 0xA1B2C3D4E5F60718}
    assert registered.timestamp_ns(batch.values()[0]) == NOW_MS * 1_000_000
    assert registered.formats == ("hex",) and registered.canonical(batch.values()[0]) == lines[0]
    assert TINY.PACKED.from_bytes(TINY.PACKED.to_bytes(batch.values()[1])) == batch.values()[1]
    assert [(f.name, f.bits) for f in registered.layout] == [
        ("timestamp_ms", "127..80"),
        ("sequence", "79..64"),
        ("random", "63..0"),
    ]
    assert registered.parse(registered.example) == int(registered.example, 16)


def test_the_example_never_repeats_when_the_clock_steps_back_or_the_sequence_runs_out(registered: Scheme) -> None:
    clock = FakeClock.from_ns(NOW_NS)
    generator = registered.new_generator(None, [], -1, clock, lambda n: RANDOM[:n])
    first = generator.generate(65_536 + 10).values()
    clock.ns -= 5_000_000_000
    later = generator.generate(5).values()
    issued = first + later
    assert len(set(issued)) == len(issued) and issued == sorted(issued)
    assert generator.high_water == NOW_MS + 1


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", "exactly 32 hex digits"),
        ("0190f1a8c0de0000a1b2c3d4e5f6071", "exactly 32 hex digits"),
        ("0190f1a8c0de0000a1b2c3d4e5f6071g", "exactly 32 hex digits"),
        ("0190f1a8c0de0000a1b2c3d4e5f607180", "exactly 32 hex digits"),
    ],
)
def test_the_example_refuses(registered: Scheme, text: str, rule: str) -> None:
    with pytest.raises(InvalidIdError, match=rule):
        registered.parse(text)


@pytest.fixture
def client(registered: Scheme, tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path) as c:
        yield c


def test_the_registered_example_is_served_and_decoded_by_the_app(client: TestClient) -> None:
    r = client.get("/v1/ids/tiny", params={"count": 3})
    assert r.status_code == 200, r.text
    ids = r.json()["ids"]
    assert len(ids) == 3 and all(re.fullmatch("[0-9a-f]{32}", i) for i in ids)
    decoded = client.get(f"/v1/decode/tiny/{ids[0].upper()}").json()
    assert decoded["scheme"] == "tiny" and decoded["id"] == ids[0]
    assert set(decoded["fields"]) == {"timestamp_ms", "sequence", "random"}
    entry = next(s for s in client.get("/v1/schemes").json()["schemes"] if s["name"] == "tiny")
    assert entry["token_patterns"] == {"hex": "[0-9a-f]{32}"} and entry["formats"] == ["hex"]
