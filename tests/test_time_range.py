"""A scheme whose layout cannot encode the time (a snowflake layout past its end or before its epoch) stops alone:
503 naming why and not ready, while the other schemes serve; against real ``idmint serve`` processes."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.support.server import Server

pytestmark = pytest.mark.integration  # real idmint serve processes (the generator's own test is in test_snowflake)

DEADLINE_S = 60.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def start(tmp_path: Path, layout: str) -> Server:
    replica = Server(tmp_path, {"IDMINT_SNOWFLAKE_LAYOUT": layout, "IDMINT_SNOWFLAKE_WORKER_ID": "1"})
    replica.wait("/healthz")  # it starts: only snowflake is out
    return replica


def assert_only_snowflake_is_out(replica: Server, words: str) -> None:
    r = replica.get("/v1/ids/snowflake")
    assert r.status_code == 503, r.text
    assert words in r.json()["detail"] and int(r.headers["retry-after"]) >= 1
    ready = replica.get("/readyz")
    assert ready.status_code == 503
    schemes = ready.json()["schemes"]
    assert schemes["snowflake"]["ready"] is False and words in schemes["snowflake"]["reason"]
    others = {name: state["ready"] for name, state in schemes.items() if name != "snowflake"}
    assert all(others.values()), others
    for name in others:
        assert replica.get(f"/v1/ids/{name}").status_code == 200, name


@pytest.mark.parametrize(
    ("layout", "words"),
    [
        ("custom:0:1:40/11/12", "ran out of time"),  # 2**40 ms from 1970: ended in 2004
        (f"custom:{now_ms() + 86_400_000}:1:41/10/12", "has not begun"),  # epoch tomorrow
    ],
    ids=["ran-out", "not-begun"],  # not the layout text: it holds the clock, and pytest-xdist's workers must agree
)
def test_a_layout_out_of_its_time_at_start_up_is_not_ready_and_the_server_serves(
    tmp_path: Path, layout: str, words: str
) -> None:
    replica = start(tmp_path, layout)
    try:
        assert_only_snowflake_is_out(replica, words)
        assert "Traceback" not in replica.log()
    finally:
        replica.stop()


def test_a_layout_that_runs_out_while_serving_answers_503_and_turns_not_ready(tmp_path: Path) -> None:
    ends_in_ms = 6000
    layout = f"custom:{now_ms() - 2**20 + ends_in_ms}:1:20/31/12"  # a 20-bit ms time field, ending in 6 s
    replica = start(tmp_path, layout)
    try:
        replica.wait("/readyz")
        assert replica.get("/v1/ids/snowflake").status_code == 200
        end = time.monotonic() + DEADLINE_S
        while (r := replica.get("/v1/ids/snowflake")).status_code == 200 and time.monotonic() < end:
            time.sleep(0.1)
        assert r.status_code == 503, r.text
        assert_only_snowflake_is_out(replica, "ran out of time")
        assert "ended at" in r.json()["detail"]
        metrics = httpx.get(f"{replica.url}/metrics").text
        assert 'status="500"' not in metrics
    finally:
        replica.stop()


def test_invalid_layout_settings_still_fail_fast(tmp_path: Path) -> None:
    replica = Server(tmp_path, {"IDMINT_SNOWFLAKE_LAYOUT": "custom:0:1:41/11/12"})  # 64 bits: too wide
    try:
        assert replica.proc.wait(DEADLINE_S) != 0
        assert "IDMINT_SNOWFLAKE_LAYOUT" in replica.log() and "63" in replica.log()
    finally:
        replica.stop()
