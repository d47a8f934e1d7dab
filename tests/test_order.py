"""The suite's stored durations (tests/support/order.py), in a pytest run of its own on a small project: a partial
run merges its figures into the file, a run of the whole suite replaces it, so a removed test leaves no figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.server import REPO

CONFTEST = 'pytest_plugins = ["tests.support.order"]\n'
INI = "[pytest]\ntestpaths = t\n"


def run(project: Path, *args: str) -> dict[str, float]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "IDMINT_TEST_DURATIONS": str(project / "durations.json"),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # the plugin alone: no xdist, hypothesis, schemathesis to load
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((project / "durations.json").read_text())


def test_a_partial_run_merges_and_a_whole_run_replaces(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_a.py").write_text("def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    stale = {"t/test_gone.py::test_removed": 99.0}
    (tmp_path / "durations.json").write_text(json.dumps(stale))

    merged = run(tmp_path, "t/test_a.py::test_one")
    assert set(merged) == {"t/test_gone.py::test_removed", "t/test_a.py::test_one"}
    assert set(run(tmp_path, "-k", "two")) == {*merged, "t/test_a.py::test_two"}

    assert set(run(tmp_path)) == {"t/test_a.py::test_one", "t/test_a.py::test_two"}  # the whole suite: no stale
