"""The real parts the end-to-end tests drive: an idmint server process and Debian's headless Chromium.

Used by ``tests/e2e/conftest.py`` (as pytest fixtures) and by ``python -m tests.e2e.screenshot``.

* :func:`run_server` starts ``python -m uvicorn --factory app.main:create_app`` on 127.0.0.1 and a free port,
  with ``IDMINT_STATE_DIR`` in a directory of the caller's and every other ``IDMINT_*`` variable removed (so the
  embedded lease backend is used), waits for ``/healthz`` and stops the process afterwards.
* :func:`launch_browser` launches ``/usr/bin/chromium`` (Debian's package, installed by
  ``.ci/install-debian-packages.sh``) through Playwright's ``executable_path``: no browser is downloaded. Playwright
  gives every launch a new, empty
  ``--user-data-dir`` of its own; the flags below keep Chromium off the network, which this machine does not have.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 10.0
HTTP_TIMEOUT_S = 10.0


class ServerError(RuntimeError):
    """The idmint server process did not start, or died; the message ends with the tail of its log."""


@dataclass
class Server:
    """A running idmint server: ``url`` is ``http://127.0.0.1:<port>`` (no trailing slash)."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def get_json(self, path: str, **params: Any) -> Any:
        """GET ``path`` (with query ``params``) and return the decoded JSON; raises urllib's HTTPError on >= 400."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=HTTP_TIMEOUT_S) as response:
            return json.loads(response.read())

    def status_and_json(self, path: str) -> tuple[int, Any]:
        """GET ``path``; return ``(status, JSON body)`` also for error statuses."""
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=HTTP_TIMEOUT_S) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def post_json(self, path: str, body: Any) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return json.loads(response.read())

    def issue(self, scheme: str, count: int = 1, **options: Any) -> list[str]:
        """``count`` fresh IDs of ``scheme`` from ``GET /v1/ids/{scheme}``, in their canonical form."""
        return list(self.get_json(f"/v1/ids/{scheme}", count=count, **options)["ids"])

    def decode(self, scheme: str, text: str) -> dict[str, Any]:
        """The server's own decode object for ``text`` (``GET /v1/decode/{scheme}/{id}``)."""
        return dict(self.get_json(f"/v1/decode/{scheme}/{urllib.parse.quote(text, safe='')}"))

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "app.main:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
    ]


@contextlib.contextmanager
def run_server(state_dir: Path, log_path: Path) -> Iterator[Server]:
    """Start a real idmint server; yield it once ``/healthz`` answers 200; stop it (SIGTERM, then SIGKILL)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IDMINT_")}
    env["IDMINT_STATE_DIR"] = str(state_dir)
    env["PYTHONUNBUFFERED"] = "1"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(server_command(port), cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = Server(url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    try:
        _wait_healthy(server)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=SERVER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    last_error = ""
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise ServerError(
                f"idmint exited with status {server.process.returncode} before answering /healthz:\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(f"{server.url}/healthz", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last_error = str(exc)
        time.sleep(0.1)
    raise ServerError(
        f"idmint did not answer /healthz within {SERVER_START_TIMEOUT_S:g} s ({last_error}):\n{server.log_tail()}"
    )


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
