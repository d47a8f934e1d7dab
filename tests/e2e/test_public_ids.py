"""The decode page reads a pasted public ID: a real idmint server with a public-ID key file, headless Chromium."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser, expect

from tests.public.support import SECRET_1, key_file
from tests.support.server import running_server


def test_a_pasted_public_id_is_decoded_as_its_internal_id(browser: Browser, tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys.toml", (1, SECRET_1))
    with running_server(tmp_path, {"IDMINT_PUBLIC_ID_KEYS_FILE": str(keys)}) as server:
        public = server.get_json("/v1/ids/ulid", format="public")["ids"][0]
        internal = server.post_json("/v1/public", {"texts": [public]})["items"][0]["id"]
        context = browser.new_context(base_url=server.url)
        context.set_default_timeout(60_000)
        problems: list[str] = []
        page = context.new_page()
        page.on("pageerror", lambda exc: problems.append(str(exc)))
        try:
            page.goto("/decode")
            page.get_by_label("IDs, log lines or ticket text").fill(public)
            expect(page.locator("#results")).to_have_attribute("data-state", "done")
            notice = page.locator("[data-public-ids]")
            expect(notice).to_contain_text(f"{public} is ulid {internal} (key 1)")
            expect(page.locator("article.card[data-scheme='ulid']").first).to_be_visible()
        finally:
            context.close()
        assert not problems
