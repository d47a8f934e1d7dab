"""The lock files agree with the dependencies they were made from (house style 16: what the service runs on is
pinned for builds). ``requirements.lock`` (the image) and ``requirements-dev.lock`` (the test command) are made by
``scripts/lock.sh`` from pyproject.toml and clients/python/pyproject.toml; a dependency added, dropped or given a
specifier its pin no longer meets fails here until the script is run again."""

from __future__ import annotations

import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
RUNTIME, DEV = ROOT / "requirements.lock", ROOT / "requirements-dev.lock"
OURS = "idmint (pyproject.toml)"
CLIENT = "idmint-client (clients/python/pyproject.toml)"
REGENERATE = "run bash scripts/lock.sh"


class Lock:
    """A uv-made requirements file: each package's pins (a package may have one per marker) with their hashes, and
    what each one is there for (its ``# via`` lines)."""

    def __init__(self, path: Path) -> None:
        self.pins: dict[str, list[Version]] = defaultdict(list)
        self.hashes: dict[str, int] = defaultdict(int)
        self.via: dict[str, set[str]] = defaultdict(set)
        current = None
        in_via = False
        for line in path.read_text().splitlines():
            pin = re.match(r"^([A-Za-z0-9_.\-]+)==([^ ;\\]+)", line)
            if pin:
                current = canonicalize_name(pin.group(1))
                self.pins[current].append(Version(pin.group(2)))
                in_via = False
            elif current and "--hash=sha256:" in line:
                self.hashes[current] += 1
            elif current and line.strip().startswith("# via"):
                rest = line.strip().removeprefix("# via").strip()
                if rest:
                    self.via[current].add(rest)
                in_via = not rest
            elif current and in_via and line.strip().startswith("#   "):
                self.via[current].add(line.strip().removeprefix("#").strip())

    def direct(self, source: str) -> set[str]:
        """The packages there because ``source`` names them."""
        return {name for name, sources in self.via.items() if source in sources}


def requirements(path: Path, *extras: str) -> list[Requirement]:
    project = tomllib.loads(path.read_text())["project"]
    listed = list(project["dependencies"])
    for extra in extras:
        listed += project["optional-dependencies"][extra]
    return [Requirement(text) for text in listed]


def check(lock: Lock, source: str, wanted: list[Requirement]) -> None:
    names = {canonicalize_name(r.name) for r in wanted}
    assert lock.direct(source) == names, (
        f"{source} lists {sorted(names - lock.direct(source))} that the lock lacks, and the lock holds "
        f"{sorted(lock.direct(source) - names)} for it that it no longer lists: {REGENERATE}"
    )
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        for version in lock.pins[name]:
            assert requirement.specifier.contains(version, prereleases=True), (
                f"the lock pins {name}=={version}, outside {requirement} in {source}: {REGENERATE}"
            )


def test_the_image_lock_holds_exactly_the_runtime_dependencies() -> None:
    check(Lock(RUNTIME), OURS, requirements(ROOT / "pyproject.toml"))


def test_the_test_lock_holds_the_dev_extra_and_the_clients_dependencies() -> None:
    lock = Lock(DEV)
    check(lock, OURS, requirements(ROOT / "pyproject.toml", "dev"))
    check(lock, CLIENT, requirements(ROOT / "clients/python/pyproject.toml"))


def test_the_test_lock_pins_what_the_image_runs_and_every_pin_has_its_hashes() -> None:
    runtime, dev = Lock(RUNTIME), Lock(DEV)
    for name, versions in runtime.pins.items():
        assert dev.pins[name] == versions, f"{name}: image {versions}, tests {dev.pins[name]}: {REGENERATE}"
    for lock in (runtime, dev):
        assert lock.pins and all(lock.hashes[name] >= len(lock.pins[name]) for name in lock.pins)


@pytest.mark.parametrize(
    ("path", "lock"),
    [("Dockerfile", "requirements.lock"), ("scripts/test.sh", "requirements-dev.lock")],
)
def test_the_image_and_the_test_command_install_from_the_locks(path: str, lock: str) -> None:
    text = (ROOT / path).read_text()
    assert re.search(rf"pip install [^\n]*--require-hashes[^\n]*-r {re.escape(lock)}", text), path
    assert re.search(r"pip install [^\n]*--no-deps[^\n]*(-e )?\.", text), path  # idmint itself, nothing re-resolved
