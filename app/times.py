"""Instants as text: one formatter of RFC 3339 UTC times for every layer (decode, the ledger, fences, sequences,
backfill refusals)."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(ns: int | None, digits: int) -> str | None:
    """``ns`` since the Unix epoch as RFC 3339 UTC with ``digits`` (3 or 6) fraction digits, truncated."""
    if ns is None:
        return None
    seconds, rem = divmod(ns, 1_000_000_000)
    try:
        base = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return None
    frac = f"{rem:09d}"[:digits]
    return f"{base}.{frac}Z"
