"""A real ``idmint serve`` under libfaketime crossing the midnight America/Havana skips: on 8 March 2026 the wall
clock goes from 23:59:59 to 01:00:00 (05:00 UTC), and the new day's numbers start at ``start`` again.

The server is started directly with ``LD_PRELOAD`` of libfaketime (Debian's ``faketime`` package; not through the
``faketime`` wrapper, whose process does not pass SIGTERM on to its child), ``TZ=UTC`` (libfaketime reads dates in
it), ``FAKETIME_DONT_FAKE_MONOTONIC=1`` (asyncio's timers and the lease deadlines keep the real monotonic clock),
on a fresh state directory, and its fake time in a file (``FAKETIME_TIMESTAMP_FILE``, read again every second:
``FAKETIME_CACHE_DURATION=1``): ``@2026-03-08 04:50:00`` while it starts (however long that takes on a busy
machine), then ``@2026-03-08 04:59:57`` once the test has its first numbers: the wall clock jumps there and runs at
the real rate. The test asks ``next`` until the period turns, waiting on that condition."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.support.server import Server

pytestmark = pytest.mark.integration  # a real server process

STARTING = "@2026-03-08 04:50:00"
BEFORE_MIDNIGHT = "@2026-03-08 04:59:57"


def libfaketime() -> str:
    """The path of libfaketime.so.1, as dpkg lists it (installed by .ci/install-debian-packages.sh)."""
    try:
        listed = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"libfaketime is not installed (apt-get install faketime): {exc}", pytrace=False)
    for line in listed.splitlines():
        if line.endswith("/libfaketime.so.1"):
            return line
    pytest.fail(f"dpkg -L libfaketime lists no libfaketime.so.1:\n{listed}", pytrace=False)


def test_a_real_server_s_daily_sequence_starts_again_at_havana_s_skipped_midnight(tmp_path: Path) -> None:
    fake_time = tmp_path / "faketime"
    fake_time.write_text(STARTING + "\n")
    env = {
        "LD_PRELOAD": libfaketime(),
        "FAKETIME_TIMESTAMP_FILE": str(fake_time),
        "FAKETIME_CACHE_DURATION": "1",
        "TZ": "UTC",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "IDMINT_STATE_DIR": str(tmp_path / "fresh-state"),
    }
    server = Server(tmp_path, env)
    try:
        server.wait("/readyz")
        url = server.url
        r = httpx.post(
            f"{url}/v1/sequences",
            json={
                "name": "tickets",
                "start": 100,
                "cache": 5,
                "reset": "daily",
                "time_zone": "America/Havana",
                "template": "T{yyyy}{mm}{dd}-{seq}",
            },
            timeout=30,
        )
        assert r.status_code == 201, r.text
        first = httpx.get(f"{url}/v1/sequences/tickets/next", params={"count": 2}, timeout=30).json()
        assert first == {
            "name": "tickets", "ids": [100, 101], "text": ["T20260307-100", "T20260307-101"], "period": "2026-03-07"
        }  # fmt: skip
        fake_time.write_text(BEFORE_MIDNIGHT + "\n")
        seen = [first]
        deadline = time.monotonic() + 120  # a guard against a clock that never moves, not a budget
        while seen[-1]["period"] == "2026-03-07":
            assert time.monotonic() < deadline, f"the period never turned: {seen[-3:]}\n{server.log_tail()}"
            time.sleep(0.2)
            r = httpx.get(f"{url}/v1/sequences/tickets/next", timeout=30)
            assert r.status_code == 200, f"{r.status_code} {r.text}\n{server.log_tail()}"
            seen.append(r.json())
        turned = seen[-1]
        assert turned == {"name": "tickets", "ids": [100], "text": ["T20260308-100"], "period": "2026-03-08"}
        before = [i for answer in seen[:-1] for i in answer["ids"]]
        assert before == list(range(100, 100 + len(before)))  # the 7th's numbers, rising, none lost between calls
        shown = httpx.get(f"{url}/v1/sequences/tickets", timeout=30).json()
        assert shown["period"] == "2026-03-08" and shown["next"] > 100  # the new day's point, past what it issued
        print(f"\nperiod turned after {len(seen) - 1} calls; the 7th issued {before[0]}..{before[-1]}")
    finally:
        server.stop()
