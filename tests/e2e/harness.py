"""The real parts the end-to-end tests drive: an idmint server process and Debian's headless Chromium.

Used by ``tests/e2e/conftest.py`` (as pytest fixtures) and by ``python -m tests.e2e.screenshot``.

* :func:`run_server` starts ``python -m uvicorn --factory app.main:create_app`` on 127.0.0.1 and a free port
  through the suite's one server harness (:mod:`tests.support.server`), with ``IDMINT_STATE_DIR`` in a directory
  of the caller's and every other ``IDMINT_*`` variable removed (so the embedded lease backend is used), waits for
  ``/healthz`` and stops the process afterwards.
* :func:`launch_browser` launches ``/usr/bin/chromium`` (Debian's package, installed by
  ``.ci/install-debian-packages.sh``) through Playwright's ``executable_path``: no browser is downloaded. Playwright
  gives every launch a new, empty
  ``--user-data-dir`` of its own; the flags below keep Chromium off the network, which this machine does not have.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.server import Server, running_server

__all__ = ["ARTIFACTS_DIR", "REPO_ROOT", "browser_missing_reason", "launch_browser", "run_server"]

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS_DIR = REPO_ROOT / "test-artifacts"

CHROMIUM_PATH = os.environ.get("IDMINT_E2E_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--no-sandbox",  # root in a container: Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # no update, safe-browsing or metrics connections to refused hosts
    "--disable-component-update",
    "--disable-sync",
)


@contextlib.contextmanager
def run_server(state_dir: Path, log_path: Path) -> Iterator[Server]:
    """A real idmint server (``uvicorn --factory app.main:create_app``, tests/support/server.py's harness) with
    ``state_dir`` as its state dir and its log in ``log_path``; yielded once ``/healthz`` answers 200, stopped
    after."""
    with running_server(
        state_dir, {"IDMINT_STATE_DIR": str(state_dir)}, uvicorn=True, log_path=log_path, ready=False
    ) as server:
        yield server


def browser_missing_reason() -> str | None:
    """Why the browser tests cannot run here, or None when Playwright and Chromium are both present."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the 'playwright' package is not installed (it comes with the dev extras: pip install -e '.[dev]')"
    if not (Path(CHROMIUM_PATH).is_file() or shutil.which(CHROMIUM_PATH)):
        return f"Chromium is not installed at {CHROMIUM_PATH} (run .ci/install-debian-packages.sh)"
    return None


def launch_browser(playwright: Playwright) -> Browser:
    """Debian's Chromium, headless, with the flags a sandbox without network needs."""
    return playwright.chromium.launch(
        executable_path=CHROMIUM_PATH, headless=True, args=list(CHROMIUM_ARGS), timeout=60_000
    )
