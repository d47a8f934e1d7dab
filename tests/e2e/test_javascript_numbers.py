"""IDs where they are stored (issue 20): in JavaScript. Chromium's ``JSON.parse`` keeps a js53 snowflake exact and
rounds a 63-bit one, the reason the js53 layout exists."""

from __future__ import annotations

from playwright.sync_api import Page

from app.schemes.snowflake import JS53, TWITTER, Layout, SnowflakeGenerator
from tests.helpers import FakeClock


def _ids_at(ms: int, layout: Layout) -> list[int]:
    """100 IDs of ``layout`` issued at Unix ms ``ms`` by its highest worker ID."""
    return SnowflakeGenerator(layout, [layout.worker_max], clock=FakeClock(ms)).generate(100).values()


def test_json_parse_keeps_js53_ids_exact_and_rounds_63_bit_ones(page: Page) -> None:
    page.goto("/")
    js53 = _ids_at(JS53.timestamp_ms(JS53.time_max), JS53)  # the largest ones the layout will issue
    twitter = _ids_at(1_764_000_000_000, TWITTER)  # today's twitter snowflakes
    for values, exact in ((js53, True), (twitter, False)):
        text = "[" + ",".join(map(str, values)) + "]"
        back = page.evaluate("text => JSON.parse(text).map(n => BigInt(n).toString())", text)
        assert (back == [str(v) for v in values]) is exact, (values[:3], back[:3])
