"""IDs where they are stored: in JavaScript. Chromium's ``JSON.parse`` keeps a js53 snowflake exact and
rounds a 63-bit one, the reason the js53 layout exists; a sequence's ``format=string`` answer, fetched by the page
from the real server, parses exactly where its default numbers are rounded."""

from __future__ import annotations

import json

from playwright.sync_api import Page

from app.schemes.snowflake import JS53, TWITTER, Layout, SnowflakeGenerator
from app.storage.sequences import MAX_VALUE
from tests.helpers import FakeClock
from tests.support.server import Server

FETCH_AND_PARSE = """async path => {
    const response = await fetch(path);
    const text = await response.text();
    return {status: response.status, text, parsed: JSON.parse(text).ids.map(n => BigInt(n).toString())};
}"""
"""In the page: fetch ``path`` and ``JSON.parse`` its answer; each ID back as the decimal text of what JavaScript
holds (``BigInt`` of a string is exact; of a number, the double it was parsed to)."""


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


def test_json_parse_keeps_sequence_next_exact_with_format_string(page: Page, server: Server) -> None:
    page.goto("/")
    server.post_json("/v1/sequences", {"name": "js-big", "start": MAX_VALUE - 10**7, "cache": 100})
    for fmt, exact in (("string", True), ("number", False)):
        got = page.evaluate(FETCH_AND_PARSE, f"/v1/sequences/js-big/next?count=50&format={fmt}")
        assert got["status"] == 200, got["text"]
        sent = [str(v) for v in json.loads(got["text"])["ids"]]  # what the server wrote, read by Python exactly
        assert int(sent[0]) > 2**53 and len(sent) == 50
        assert (got["parsed"] == sent) is exact, (sent[:3], got["parsed"][:3])
    got = page.evaluate(
        "async path => { const r = await (await fetch(path, {method: 'POST'})).json(); return [r.first, r.last]; }",
        "/v1/sequences/js-big/range?count=3&format=string",
    )
    assert all(isinstance(v, str) for v in got) and int(got[1]) - int(got[0]) == 2 and int(got[0]) > 2**53
