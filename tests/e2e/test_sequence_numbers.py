"""The decode page reads numbers of the fleet's sequences: a real server, headless Chromium, Playwright.
Typed in, an invoice number shows which sequence issued it, its number and period, that its check digit is correct,
and what became of it; an ID of a scheme shows nothing of the kind."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect  # dev extra; a missing package fails here, it is never skipped

from tests.support.server import Server

INPUT_LABEL = "IDs, log lines or ticket text"


def test_an_invoice_number_is_read_on_the_decode_page(page: Page, server: Server) -> None:
    r = httpx.post(
        f"{server.url}/v1/sequences",
        json={
            "name": "page-invoices",
            "reset": "monthly",
            "template": "FV/{yyyy}/{mm}/{seq:04}{check}",
            "check_digit": "luhn",
        },  # fmt: skip
        timeout=30,
    )
    assert r.status_code in (200, 201), r.text
    issued = httpx.get(f"{server.url}/v1/sequences/page-invoices/next", timeout=30).json()
    text, period, value = issued["text"][0], issued["period"], issued["ids"][0]
    page.goto("/decode")
    page.get_by_label(INPUT_LABEL).fill(text)
    box = page.locator("#sequence-number")
    expect(box).to_be_visible()
    item = box.locator("li[data-sequence='page-invoices']")
    expect(item).to_contain_text(f"page-invoices \u2014 number {value}, period beginning {period}")
    expect(item).to_contain_text("luhn check digit correct; reserved")
    page.get_by_label(INPUT_LABEL).fill("000S94VR000002M6NWVVR14D2G")  # a Wiji ID: no sequence reads it
    expect(box).to_be_hidden()
