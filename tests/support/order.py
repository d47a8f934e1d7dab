"""pytest plugin: the suite's order from its own measured durations, and the soak lane's size.

* Every run records each test's duration (setup, call and teardown added up) and, at its end, merges them into
  ``tests/durations.json`` (``{node ID: seconds}``; tests not run keep their figure; a run of the whole suite
  replaces the file, so tests renamed or removed leave nothing behind). A run on pytest-xdist
  records on the controller, which sees every worker's reports; workers record nothing.
* At collection, :func:`longest_first` orders the tests by the measured duration of the unit pytest-xdist hands
  out (a test alone, or every test of one ``xdist_group``, added up), longest first, so that no worker is left
  with a long unit at the end while the other idles. A test with no figure yet counts as :data:`UNKNOWN_SLOW_S`
  when it starts real processes and :data:`UNKNOWN_FAST_S` otherwise. pytest-xdist's own reorder (by number of
  tests in a group) is switched off, so this order is the one it hands out.
* Tests marked ``soak`` run at a small size in the test command and whole in ``scripts/soak.sh``
  (``IDMINT_SOAK=full``): :func:`soak_size` gives the size a soak runs at.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

DURATIONS = Path(os.environ.get("IDMINT_TEST_DURATIONS") or Path(__file__).resolve().parents[1] / "durations.json")
"""The stored durations: tests/durations.json (``IDMINT_TEST_DURATIONS`` names another file: the plugin's own test)."""
UNKNOWN_SLOW_S = 5.0
"""The figure of a test that starts real processes and has none measured yet."""
UNKNOWN_FAST_S = 0.05
SLOW_MARKERS = ("integration", "ops", "e2e", "soak", "xdist_group")

_measured: dict[str, float] = defaultdict(float)
_config: pytest.Config | None = None


def soak_size(full: int, small: int) -> int:
    """The size a soak test runs at: ``full`` under ``IDMINT_SOAK=full`` (``scripts/soak.sh``), else ``small``
    (the test command: every guarantee checked, at a size that fits the suite's time)."""
    return full if os.environ.get("IDMINT_SOAK", "").lower() == "full" else small


def bare_node_id(node_id: str) -> str:
    """``node_id`` without pytest-xdist's ``@<group>`` suffix (a ``]`` after the ``@`` belongs to a parameter)."""
    at = node_id.rfind("@")
    return node_id[:at] if at > node_id.rfind("]") else node_id


def load() -> dict[str, float]:
    """The stored durations (empty when the file is missing or unreadable)."""
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def longest_first(items: list[pytest.Item], group_of: Callable[[pytest.Item], str | None]) -> None:
    """Sort ``items`` in place: the units pytest-xdist hands out (an ``xdist_group`` whole, else one test) by
    their stored duration, longest first; a unit's tests stay together in their order."""
    stored = load()

    def duration(item: pytest.Item) -> float:
        known = stored.get(bare_node_id(item.nodeid))
        if known is not None:
            return known
        return UNKNOWN_SLOW_S if any(item.get_closest_marker(m) for m in SLOW_MARKERS) else UNKNOWN_FAST_S

    units = {id(item): group_of(item) or bare_node_id(item.nodeid) for item in items}
    totals: dict[str, float] = defaultdict(float)
    for item in items:
        totals[units[id(item)]] += duration(item)
    first_seen = {unit: n for n, unit in reversed(list(enumerate(units[id(i)] for i in items)))}
    items.sort(key=lambda item: (-totals[units[id(item)]], first_seen[units[id(item)]]))


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # the collection order (longest first) is the order handed out


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _config is not None and not _is_worker(_config):
        _measured[bare_node_id(report.nodeid)] += report.duration


def _whole_suite(session: pytest.Session, exitstatus: int) -> bool:
    """Whether this run ran every test of the suite to its end: no paths, ``-k``, ``-m`` or ``--deselect`` given,
    not stopped early (``-x``, an interrupt), and it ended with passes or failures only."""
    config = session.config
    return (
        config.args_source is pytest.Config.ArgsSource.TESTPATHS
        and not config.option.keyword
        and not config.option.markexpr
        and not config.getoption("deselect", None)
        and not session.shouldstop
        and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Store what this run measured: merged into the stored durations, or, after a run of the whole suite, in their
    place (a test renamed or removed leaves no figure behind)."""
    if _is_worker(session.config) or not _measured:
        return
    fresh = {k: round(v, 2) for k, v in _measured.items()}
    merged = fresh if _whole_suite(session, exitstatus) else {**load(), **fresh}
    text = json.dumps(dict(sorted(merged.items())), indent=0) + "\n"
    try:
        DURATIONS.write_text(text)
    except OSError:  # a read-only checkout still runs its tests
        pass
