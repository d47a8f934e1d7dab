"""Fixtures for the end-to-end tests: a real idmint server process and Debian's headless Chromium (Playwright).

When Playwright or Chromium is missing the tests fail with the reason (they are never skipped): the README's test
command installs both (Playwright with the dev extras, Chromium through ``.ci/install-debian-packages.sh``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.e2e.harness import ARTIFACTS_DIR, browser_missing_reason, launch_browser, run_server
from tests.support.server import Server

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, ViewportSize

BROWSER_TIME_ZONE = "Asia/Kolkata"
"""The browser's zone in the tests: a half-hour offset (UTC+05:30) shows local time is really converted."""
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}
DEFAULT_TIMEOUT_MS = 15_000


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end test against a real server in headless Chromium")
    config.addinivalue_line(
        "markers", "console_error(text): the page may log console errors containing text (a 4xx the test provokes)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """``test-artifacts/`` at the repository root (gitignored): screenshots and CSVs of the run."""
    ARTIFACTS_DIR.mkdir(exist_ok=True)
    return ARTIFACTS_DIR


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory, artifacts_dir: Path) -> Iterator[Server]:
    """A real idmint server (``uvicorn --factory app.main:create_app``) on 127.0.0.1 and a free port."""
    state_dir = tmp_path_factory.mktemp("idmint-state")
    with run_server(state_dir, artifacts_dir / "e2e-server.log") as running:
        yield running


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """Chromium for the tests of this package only: sync_playwright runs an event loop in the main thread while
    it is open, so it must be closed before tests outside tests/e2e run theirs (anyio tests)."""
    reason = browser_missing_reason()
    if reason is not None:
        pytest.fail(f"end-to-end tests cannot run: {reason} (run .ci/install-debian-packages.sh)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch_browser(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser, server: Server, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh browser context on the server (zone Asia/Kolkata, en-US); fails the test on any console error,
    page error or Content-Security-Policy violation the page caused (but console errors containing the text of a
    ``console_error`` marker: Chromium logs every 4xx response a test provokes on purpose)."""
    allowed = [mark.args[0] for mark in request.node.iter_markers("console_error")]
    context = browser.new_context(
        base_url=server.url,
        timezone_id=BROWSER_TIME_ZONE,
        locale="en-US",
        viewport=VIEWPORT,
        accept_downloads=True,
    )
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    problems: list[str] = []
    tab = context.new_page()
    tab.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}") if msg.type == "error" else None)
    tab.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    try:
        yield tab
    finally:
        context.close()
    problems = [p for p in problems if not (p.startswith("console") and any(text in p for text in allowed))]
    assert not problems, "the page reported errors:\n" + "\n".join(problems)
