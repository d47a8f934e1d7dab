"""The OpenAPI docs at /docs render in Chromium from the package's own files (the machine may have no internet)."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.support.server import Server


def test_docs_render_offline_with_every_route(page: Page, server: Server) -> None:
    foreign: list[str] = []
    page.on("request", lambda r: foreign.append(r.url) if not r.url.startswith(server.url) else None)
    page.goto("/docs")
    paths = page.locator(".opblock-summary-path")
    expect(paths.first).to_be_visible()
    shown = set(paths.all_inner_texts())
    assert {"/v1/ids/{scheme}", "/v1/ids/{scheme}/stream", "/v1/decode/{id}", "/readyz"} <= {
        s.replace("\u200b", "") for s in shown
    }
    assert foreign == []
