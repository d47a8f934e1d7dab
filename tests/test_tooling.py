"""The linters are part of the test command: ruff (lint rules and formatting from pyproject's ``[tool.ruff]``) and
mypy (strict on ``app`` and the Python client, relaxed on ``tests``, from ``[tool.mypy]``) must pass.

Both run as subprocesses of this virtualenv's interpreter (the versions the dev extra pins) from the repository
root, so they read pyproject.toml exactly as a developer's ``ruff check`` / ``ruff format`` / ``mypy`` would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.cache import cache_dir

ROOT = Path(__file__).resolve().parents[1]
LINTED = ["app", "clients/python", "clients/conformance", "tests", "bench"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_check_passes() -> None:
    result = _run("ruff", "check", "--no-cache", *LINTED)
    assert result.returncode == 0, f"ruff check {' '.join(LINTED)} failed:\n{result.stdout}{result.stderr}"


def test_ruff_format_leaves_nothing_to_change() -> None:
    result = _run("ruff", "format", "--check", "--no-cache", *LINTED)
    assert result.returncode == 0, f"ruff format --check failed (run: ruff format {' '.join(LINTED)}):\n{result.stdout}"


def test_mypy_strict_passes() -> None:
    # mypy's incremental cache kept between runs and clones: an entry is used only when its module's source hash
    # and mypy's version and options match, so a fresh clone checks only what changed.
    result = _run("mypy", "--cache-dir", str(cache_dir("mypy")))
    assert result.returncode == 0, f"mypy (files, strict: pyproject.toml) failed:\n{result.stdout}{result.stderr}"
