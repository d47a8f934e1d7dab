"""The decode page's "IDs made between two times" box, in Chromium against a real server: it
lists the schemes whose IDs sort by time, shows both bounds and the SQL the API answers, and the API's reason when
a parameter breaks a rule."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.server import Server


def test_the_box_shows_both_bounds_and_the_sql(page: Page, server: Server) -> None:
    page.goto("/")
    scheme = page.get_by_label("Scheme", exact=True)
    expect(scheme.locator("option[value=uuidv7]")).to_have_count(1)
    schemes = httpx.get(f"{server.url}/v1/schemes").json()["schemes"]
    listed = scheme.locator("option").evaluate_all("options => options.map(o => o.value)")
    sortable = [
        s["name"] for s in (schemes.values() if isinstance(schemes, dict) else schemes) if s["bounds"]["storages"]
    ]
    assert listed == sortable
    scheme.select_option("eight-byte")
    page.get_by_label("Column type").select_option("text")
    page.get_by_label("From (inclusive)").fill("2025-01-01T00:00:00Z")
    page.get_by_label("To (exclusive)").fill("2025-01-02T00:00:00+05:30")
    page.get_by_label("Column name").fill("orders.id")
    page.get_by_role("button", name="Show the bounds").click()
    answer = httpx.get(
        f"{server.url}/v1/bounds/eight-byte",
        params={
            "mode": "time_sequential",
            "storage": "text",
            "from": "2025-01-01T00:00:00Z",
            "to": "2025-01-02T00:00:00+05:30",
            "column": "orders.id",
            "dialect": "postgresql",
        },
    ).json()
    result = page.locator("#bounds-result")
    expect(result).to_contain_text(answer["sql"])
    expect(result).to_contain_text(answer["lower"])
    expect(result).to_contain_text(answer["upper"])
    expect(result).to_contain_text("Spread-mode IDs")


def test_a_typeid_text_column_gets_its_prefix(page: Page, server: Server) -> None:
    page.goto("/")
    page.get_by_label("Scheme", exact=True).select_option("typeid")
    page.get_by_label("Column type").select_option("text")
    page.get_by_label("type (optional)").fill("user")
    page.get_by_label("From (inclusive)").fill("2025-01-01T00:00:00Z")
    page.get_by_label("To (exclusive)").fill("2025-01-02T00:00:00Z")
    page.get_by_role("button", name="Show the bounds").click()
    expect(page.locator("#bounds-result")).to_contain_text("id >= 'user_01jgfjjz000000000000000000'")


@pytest.mark.console_error("status of 422")
def test_the_box_shows_the_rule_a_parameter_breaks(page: Page) -> None:
    page.goto("/")
    page.get_by_label("Scheme", exact=True).select_option("ulid")
    page.get_by_label("From (inclusive)").fill("2025-02-30T00:00:00Z")
    page.get_by_role("button", name="Show the bounds").click()
    expect(page.locator("#bounds-result .notice-error")).to_contain_text("day is out of range for month")
