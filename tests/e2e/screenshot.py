"""Take the README's screenshot of the decode page: ``python -m tests.e2e.screenshot [--out docs/decode-page.png]``.

Starts a real idmint server (temporary state directory), issues a few fresh IDs of every scheme, pastes them into
the page as a short log excerpt in Debian's headless Chromium and saves a PNG of the page with the decoded table.
With ``--single`` it shows one ID decoded in full instead.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tests.e2e.harness import REPO_ROOT, browser_missing_reason, launch_browser, run_server

if TYPE_CHECKING:
    from playwright.sync_api import ViewportSize

DEFAULT_OUT = REPO_ROOT / "docs" / "decode-page.png"
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
TIME_ZONE = "Europe/Berlin"


def log_excerpt(ids: dict[str, list[str]]) -> str:
    """A short, plausible log excerpt with fresh IDs of every scheme in it."""
    return "\n".join(
        [
            f"09:41:07.112 INFO  checkout  order {ids['eight-byte'][0]} paid, 3 items",
            f"09:41:07.240 INFO  auth      user {ids['siq'][0]} signed in",
            f"09:41:07.305 WARN  sync      doc {ids['muid'][0]} merged from {ids['hlc-ulid'][0]}",
            f"09:41:07.318 DEBUG trace     span {ids['wiji'][0]} closed after 4 ms",
            "09:41:07.402 ERROR import    row 17: bad id 5D5EAC793E61F-0000000000000-00000",
            "5D5EAC793E61F-0000000000000-00000",
        ]
    )


def take(out: Path, single: bool) -> None:
    from playwright.sync_api import expect, sync_playwright

    with (
        tempfile.TemporaryDirectory(prefix="idmint-screenshot-") as tmp,
        run_server(Path(tmp) / "state", Path(tmp) / "server.log") as server,
    ):
        # The seed five: log_excerpt() places each by name.
        ids = {scheme: server.issue(scheme, count=1) for scheme in ("muid", "eight-byte", "hlc-ulid", "siq", "wiji")}
        text = ids["eight-byte"][0] if single else log_excerpt(ids)
        with sync_playwright() as playwright:
            browser = launch_browser(playwright)
            try:
                context = browser.new_context(
                    base_url=server.url, viewport=VIEWPORT, timezone_id=TIME_ZONE, locale="en-GB", device_scale_factor=1
                )
                page = context.new_page()
                page.goto("/decode")
                expect(page.locator("#layout-list details").first).to_be_visible()
                page.get_by_label("IDs, log lines or ticket text").fill(text)
                expect(page.locator("#results")).to_have_attribute("data-state", "done", timeout=15_000)
                page.evaluate("() => document.activeElement.blur()")
                bottom = page.evaluate(
                    "() => Math.ceil(document.querySelector('#results').getBoundingClientRect().bottom + scrollY)"
                )
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(
                    path=str(out),
                    clip={"x": 0, "y": 0, "width": VIEWPORT["width"], "height": bottom + 24},
                    full_page=True,
                )
            finally:
                browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"PNG to write (default {DEFAULT_OUT})")
    parser.add_argument("--single", action="store_true", help="one ID decoded in full instead of a log excerpt")
    args = parser.parse_args(argv)
    reason = browser_missing_reason()
    if reason is not None:
        print(f"screenshot: {reason}", file=sys.stderr)
        return 1
    take(args.out, args.single)
    print(f"screenshot: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
