"""prometheus-client's multiprocess mode, set up exactly as its "Multiprocess Mode" docs say
(https://prometheus.github.io/client_python/multiprocess/).

* :func:`prepare_process_environment`: called by ``idmint serve`` before uvicorn starts and before prometheus-client
  is imported; sets (or, when the operator preset it, keeps) ``PROMETHEUS_MULTIPROC_DIR`` and wipes it.
* :func:`worker_exit`: the docs' ``child_exit`` hook (``mark_process_dead``), for the supervisor that reaped a worker.
* :func:`scrape_registry`: what one scrape reads: a fresh registry with a ``MultiProcessCollector``, after sweeping
  the live-gauge files of processes that no longer exist (uvicorn has no ``child_exit`` hook, and a SIGKILLed worker
  calls nothing).

Nothing here imports prometheus-client at module import time.
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING

from app.errors import ConfigError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The environment variable prometheus-client reads, at import time, to choose multiprocess mode."""

_DB_FILE = re.compile(r"^(?:counter|histogram|summary|gauge_[a-z]+)_(\d+)\.db$")
_LIVE_GAUGE_FILE = re.compile(r"^gauge_live[a-z]+_(\d+)\.db$")


def prepare_process_environment(workers: int) -> None:
    """Set up prometheus-client's multiprocess mode for ``idmint serve``, as its docs say, when it is needed.

    Multiprocess mode is used when ``workers > 1`` or when the operator already set ``PROMETHEUS_MULTIPROC_DIR``
    (the docs' preferred way: from the start-up script or the container's environment). Without a preset
    directory, a fresh temporary one is created and exported through ``os.environ`` so that the uvicorn workers,
    which are spawned after this call, inherit it; it is removed when this (supervisor) process exits. Either way
    the directory is wiped of earlier runs' ``*.db`` files ("must be wiped between process runs, before startup is
    recommended"). With one worker and no preset directory nothing is done: the in-process registry is exact and
    keeps the process metrics.

    Must run before prometheus-client is imported in this process: it reads the variable once, at import. Raises
    :class:`~app.errors.ConfigError` when that order was broken, or when ``workers < 1``.
    """
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    preset = os.environ.get(MULTIPROC_ENV)
    if workers == 1 and not preset:
        return
    if "prometheus_client.values" in sys.modules:
        from prometheus_client import values

        if not getattr(values.ValueClass, "_multiprocess", False):
            raise ConfigError(
                f"{MULTIPROC_ENV} must be set before prometheus_client is imported; "
                "call app.metrics.prepare_process_environment() first"
            )
    if preset:
        os.makedirs(preset, exist_ok=True)
        wipe_multiprocess_dir(preset)
        return
    path = tempfile.mkdtemp(prefix="idmint-metrics-")
    os.environ[MULTIPROC_ENV] = path
    owner = os.getpid()

    def _remove() -> None:
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(_remove)


def wipe_multiprocess_dir(path: str) -> int:
    """Delete prometheus-client's ``*.db`` files from ``path`` (an earlier run's values); returns how many."""
    removed = 0
    for name in os.listdir(path):
        if _DB_FILE.match(name):
            try:
                os.remove(os.path.join(path, name))
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def multiprocess_dir() -> str | None:
    """The multiprocess directory if multiprocess mode is on in this process, else None."""
    return os.environ.get(MULTIPROC_ENV) or None


def require_multiprocess_values() -> None:
    """Raise :class:`~app.errors.ConfigError` unless prometheus-client was imported in multiprocess mode (the
    directory was set before the import, so that values go to its mmap files)."""
    from prometheus_client import values

    if not getattr(values.ValueClass, "_multiprocess", False):
        raise ConfigError(
            f"{MULTIPROC_ENV} was set after prometheus_client was imported; set it before the process "
            "starts (idmint serve does, through app.metrics.prepare_process_environment)"
        )


def worker_exit(pid: int) -> None:
    """Bookkeeping when a worker process ``pid`` has exited: drop its live gauges (``mark_process_dead``).

    The equivalent of the docs' Gunicorn ``child_exit`` hook, for the supervisor that started the workers to call
    after it reaped one. Does nothing in single-process mode.
    """
    path = multiprocess_dir()
    if path is None:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, path)


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists on this machine (signal 0; one owned by another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap_dead_processes(path: str) -> None:
    """``mark_process_dead`` for every process that left live-gauge files behind and no longer exists."""
    pids = set()
    for file in glob.glob(os.path.join(path, "gauge_live*_*.db")):
        match = _LIVE_GAUGE_FILE.match(os.path.basename(file))
        if match:
            pids.add(int(match.group(1)))
    own = os.getpid()
    dead = [pid for pid in pids if pid != own and not pid_alive(pid)]
    if dead:
        from prometheus_client import multiprocess

        for pid in dead:
            multiprocess.mark_process_dead(pid, path)


def scrape_registry(path: str) -> CollectorRegistry:
    """A fresh registry holding a ``MultiProcessCollector`` over every worker's files in ``path``, after dropping
    the live gauges of processes that no longer exist."""
    from prometheus_client import CollectorRegistry, multiprocess

    _reap_dead_processes(path)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)
    return registry
