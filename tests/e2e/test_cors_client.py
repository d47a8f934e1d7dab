"""The TypeScript client in a browser: a page served from another origin (a second local HTTP server) imports the
client's browser build (tsc's ES modules, no bundler) and asks a real ``idmint serve`` for IDs. The server lists
that origin in ``IDMINT_CORS_ORIGINS``: the preflight its API key header causes is answered, and the IDs arrive. A
page of an origin not listed gets nothing: Chromium refuses the answer (CORS), and the client fails over to no
replica, handing nothing out."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser

from tests.e2e.harness import REPO_ROOT
from tests.support.server import Server, running_server

TYPESCRIPT = REPO_ROOT / "clients" / "typescript"
CALL_THE_CLIENT = """async ([base, key]) => {
    const { Client } = await import(`${location.origin}/idmint/index.js`);
    const client = new Client([base], { apiKey: key, timeoutMs: 10000 });
    try {
        return { ok: true, ids: await client.ids("wiji", 5), one: await client.newId("ulid", { format: "uuid" }) };
    } catch (error) {
        return { ok: false, error: error.name, message: String(error.message) };
    } finally {
        client.close();
    }
}"""
"""In the page: the client's ``ids`` and ``newId`` against ``base``, with an API key (every request preflighted)."""


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # http.server names it format
        return


@pytest.fixture(scope="module")
def browser_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding ``index.html`` and the client's browser build in ``idmint/``."""
    root = tmp_path_factory.mktemp("page")
    # npm ci empties node_modules first: the conformance run (scripts/test-clients.sh) installs and builds under
    # the same lock, so neither removes the other's tsc while it runs.
    with open(TYPESCRIPT / ".npm.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (TYPESCRIPT / "node_modules" / ".bin" / "tsc").exists():
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=TYPESCRIPT, check=True)
        tsc = str(TYPESCRIPT / "node_modules" / ".bin" / "tsc")
        subprocess.run(
            [tsc, "-p", "tsconfig.json", "--outDir", str(root / "idmint"), "--declaration", "false"],
            cwd=TYPESCRIPT,
            check=True,
        )
    (root / "index.html").write_text("<!doctype html>\n<title>an app on another origin</title>\n")
    return root


@contextlib.contextmanager
def page_server(root: Path) -> Iterator[str]:
    """A static HTTP server of ``root`` on 127.0.0.1 and a free port (another origin than idmint's); its origin."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def origins(browser_build: Path) -> Iterator[tuple[str, str]]:
    """(a listed origin, an origin not listed), both serving the page and the client's build."""
    with page_server(browser_build) as listed, page_server(browser_build) as other:
        yield listed, other


@pytest.fixture(scope="module")
def cors_server(tmp_path_factory: pytest.TempPathFactory, origins: tuple[str, str]) -> Iterator[Server]:
    """A real ``idmint serve`` listing the first origin in IDMINT_CORS_ORIGINS."""
    state_dir = tmp_path_factory.mktemp("idmint-cors")
    env = {"IDMINT_STATE_DIR": str(state_dir), "IDMINT_CORS_ORIGINS": origins[0]}
    with running_server(state_dir, env) as server:
        yield server


def call_from(browser: Browser, origin: str, server: Server) -> tuple[dict[str, Any], list[str]]:
    """The client's answer in a page of ``origin``, and what the page logged to its console."""
    context = browser.new_context()
    logged: list[str] = []
    try:
        page = context.new_page()
        page.on("console", lambda message: logged.append(message.text))
        page.goto(origin + "/index.html")
        result = page.evaluate(CALL_THE_CLIENT, [server.url, "a-key"])
    finally:
        context.close()
    return result, logged


def test_a_listed_origins_page_gets_ids_through_the_client(
    browser: Browser, origins: tuple[str, str], cors_server: Server
) -> None:
    result, logged = call_from(browser, origins[0], cors_server)
    assert result["ok"], (result, logged)
    assert len(result["ids"]) == 5 and len(set(result["ids"])) == 5
    assert all(re.fullmatch(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", one) for one in result["ids"]), result["ids"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", result["one"])


def test_an_origin_not_listed_is_refused_by_the_browser(
    browser: Browser, origins: tuple[str, str], cors_server: Server
) -> None:
    result, logged = call_from(browser, origins[1], cors_server)
    assert not result["ok"] and result["error"] == "NoReplicaAvailableError", result
    assert any("CORS policy" in line for line in logged), logged
