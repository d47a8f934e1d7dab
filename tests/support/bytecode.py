"""pytest plugin: idmint's modules compiled to bytecode once, before any test starts a process.

Every ``idmint serve``, ``idmint`` command, client runner and driver the suite starts imports ``app`` (or the
Python client) afresh. Under ``PYTHONDONTWRITEBYTECODE`` (or a read-only ``__pycache__``) Python never writes the
``.pyc`` files of these editable packages, so each such process compiled app's 130-odd modules from source again.
:func:`compile_sources` writes them once at the start of a run (on the controller under pytest-xdist, before the
workers start); a source edited later is compiled in memory again, as before, until the next run. Installed
packages are compiled by pip at install time.

Under pytest-xdist every worker also imports the test modules, the ``tests.support`` plugins and the pytest plugins'
packages (hypothesis, anyio...) through pytest's assertion rewriter, which parses, rewrites and compiles each one
and, under ``PYTHONDONTWRITEBYTECODE``, keeps none: about 10 s of CPU per worker before its first test. Before the
workers start, :func:`prime_rewrites` writes pytest's own cache of those rewritten modules (its hash-checked
``__pycache__/*-pytest-*.pyc``, the file each worker reads before it would rewrite), on two processes: the test
modules under ``tests/`` and every module the controller itself rewrote (``tests.support``, the plugins' modules it
imported; modules of theirs first imported by a worker are still rewritten there).
"""

from __future__ import annotations

import compileall
import contextlib
import multiprocessing
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("app", "clients/python", "clients/conformance", "tests/support")
"""The directories the processes the suite starts import from the working tree."""


def compile_sources(root: Path = REPO) -> None:
    """Write the ``__pycache__`` bytecode of :data:`SOURCES` under ``root`` where it is missing or stale (a read-only
    tree is left as it is)."""
    for name in SOURCES:
        with contextlib.suppress(OSError):
            compileall.compile_dir(root / name, quiet=2, workers=1)


PRIME_GUARD_S = 600.0
"""A guard against a hung priming process (pytest then stops with the error), not a time budget."""
_CONFIG: pytest.Config | None = None
"""The controller's config, inherited by the forked priming processes (the rewriter reads its ini options)."""


def _prime(paths: list[Path]) -> int:
    assert _CONFIG is not None
    state = _CONFIG.stash[rewrite.assertstate_key]
    written = 0
    for fn in paths:
        with contextlib.suppress(OSError, SyntaxError):
            cache = rewrite.get_cache_dir(fn)
            if not rewrite.try_makedirs(cache):
                continue
            pyc = cache / (fn.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(fn, pyc, state.trace) is not None:
                continue
            source_hash, co = rewrite._rewrite_test(fn, _CONFIG)
            written += rewrite._write_pyc(state, co, source_hash, pyc)
    return written


def rewritten_modules(config: pytest.Config, roots: Iterable[Path]) -> list[Path]:
    """The sources a worker passes through the assertion rewriter: every ``test_*.py`` and ``conftest.py`` under
    ``roots``, and the modules this process already rewrote (the plugins' packages, ``tests.support``)."""
    hook = config.pluginmanager.rewrite_hook
    found = {Path(p).resolve() for p in getattr(hook, "_rewritten_names", {}).values()}
    for root in roots:
        if root.suffix == ".py":
            found.add(root.resolve())
        elif root.is_dir():
            found.update(
                p.resolve() for p in root.rglob("*.py") if p.name.startswith("test_") or p.name == "conftest.py"
            )
    return sorted(p for p in found if p.suffix == ".py")


def prime_rewrites(config: pytest.Config, paths: list[Path], processes: int = 2) -> int:
    """Write pytest's rewritten-module cache of ``paths`` (sources) where it is missing or stale; returns how many
    were written. With ``processes`` over 1, forked processes share the work (the config is inherited, not
    pickled)."""
    global _CONFIG
    if not paths:
        return 0
    _CONFIG = config
    try:
        if processes <= 1:
            return _prime(paths)
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork")) as pool:
            return sum(pool.map(_prime, [paths[i::processes] for i in range(processes)], timeout=PRIME_GUARD_S))
    finally:
        _CONFIG = None


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    # The controller, or a run without pytest-xdist.
    compile_sources()
    if getattr(config.option, "numprocesses", None) and config.getvalue("assertmode") == "rewrite":
        tests = REPO / "tests"  # under it only: a root of "." would walk .venv and node_modules
        roots = [r for r in (Path(a.split("::")[0]).resolve() for a in config.args) if r.is_relative_to(tests)]
        roots = roots or [tests]
        prime_rewrites(config, rewritten_modules(config, roots), processes=min(2, os.cpu_count() or 1))
