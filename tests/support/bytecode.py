"""pytest plugin: idmint's modules compiled to bytecode once, before any test starts a process.

Every ``idmint serve``, ``idmint`` command, client runner and driver the suite starts imports ``app`` (or the
Python client) afresh. Under ``PYTHONDONTWRITEBYTECODE`` (or a read-only ``__pycache__``) Python never writes the
``.pyc`` files of these editable packages, so each such process compiled app's 130-odd modules from source again.
:func:`compile_sources` writes them once at the start of a run (on the controller under pytest-xdist, before the
workers start); a source edited later is compiled in memory again, as before, until the next run. Installed
packages are compiled by pip at install time.
"""

from __future__ import annotations

import compileall
import contextlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("app", "clients/python", "clients/conformance", "tests/support")
"""The directories the processes the suite starts import from the working tree."""


def compile_sources(root: Path = REPO) -> None:
    """Write the ``__pycache__`` bytecode of :data:`SOURCES` under ``root`` where it is missing or stale (a read-only
    tree is left as it is)."""
    for name in SOURCES:
        with contextlib.suppress(OSError):
            compileall.compile_dir(root / name, quiet=2, workers=1)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller, or a run without pytest-xdist
        compile_sources()
