"""The lease's own connection, tested the same way on every SQL backend (tests/storage/*/test_lease_connection.py):
while another session holds a gapless sequence's lock, :data:`WAITERS` reserve requests wait on it and the node is
watched for :data:`HOLD_S` (:func:`watch_while_locked`); its renewals must never queue behind them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx

from tests.support.server import Server

TTL_S = 6
MARGIN_S = 1.0
"""The node's lease TTL and safety margin here (longer than the other storage tests' 3 s and 1 s): renewals every
2 s, each with 3 s before the claim's deadline (TTL - margin after the last one), so that a busy machine delaying one
renewal does not pass for one queued behind the lock."""
HOLD_S = 2 * TTL_S
"""How long the other session holds the sequence's lock: two TTLs (a lease renewed on the stores' connection would
fail closed within the first, at TTL minus the safety margin)."""
WAITERS = 4
"""Concurrent sequence requests kept waiting on the lock."""
SEQUENCE = "invoices"
"""The gapless sequence whose lock is held."""


def until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.05)


def watch_while_locked(node: Server, release: Callable[[], None]) -> tuple[dict[str, float], list[int]]:
    """With :data:`SEQUENCE`'s lock held by another session (``release()`` ends it): keep :data:`WAITERS` reserve
    requests on it, wait until one gave up (503), watch ``node`` for :data:`HOLD_S` (:func:`watch`), release.
    Returns (what :func:`watch` saw, the status codes of the reserve requests answered while the lock was held)."""
    stop = threading.Event()
    answers: list[int] = []

    def reserve() -> None:
        while not stop.is_set():
            r = httpx.post(f"{node.url}/v1/sequences/{SEQUENCE}/reserve", json={"ttl_s": 60}, timeout=30)
            answers.append(r.status_code)

    waiters = [threading.Thread(target=reserve, daemon=True) for _ in range(WAITERS)]
    for waiter in waiters:
        waiter.start()
    try:
        until(lambda: 503 in answers, 30, "a sequence request waited on the lock and gave up")
        gaps = watch(node, HOLD_S)
        while_held = list(answers)
    finally:
        stop.set()
        release()
    for waiter in waiters:
        waiter.join(60)
    return gaps, while_held


def watch(node: Server, seconds: float) -> dict[str, float]:
    """Poll /readyz and GET /v1/ids/eight-byte for ``seconds``: how many answers were not 200, and the longest
    stretch (s) between two 200s of /readyz."""
    not_ready = refused = polls = 0
    longest = 0.0
    end = time.monotonic() + seconds
    last_ready = time.monotonic()
    while time.monotonic() < end:
        polls += 1
        ready = node.get("/readyz").status_code
        now = time.monotonic()
        if ready == 200:
            longest = max(longest, now - last_ready)
            last_ready = now
        else:
            not_ready += 1
        if node.get("/v1/ids/eight-byte").status_code != 200:
            refused += 1
        time.sleep(0.05)
    longest = max(longest, time.monotonic() - last_ready)
    return {"polls": polls, "not_ready": not_ready, "ids_refused": refused, "longest_ready_gap_s": round(longest, 2)}
