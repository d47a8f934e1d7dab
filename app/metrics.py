"""Prometheus metrics for idmint (prometheus-client).

The rest of the app calls only the methods of :class:`Metrics`; they are cheap and called per batch or per request,
never per ID. (Bodies to be completed by the operations issue: multiprocess mode, full metric set.)
"""

from __future__ import annotations

from typing import Any


class Metrics:
    """Facade over the process's Prometheus collectors. One instance per app."""

    def __init__(self, scheme_names: list[str], version: str) -> None:
        self.scheme_names = scheme_names
        self.version = version

    # -- issuing ---------------------------------------------------------------------------------------------
    def ids_issued(self, scheme: str, count: int) -> None:
        """``idmint_ids_issued_total{scheme}`` += count (called once per batch)."""

    def generator_stats(self, scheme: str, rollbacks: int, max_rollback_ns: int, exhausted: int) -> None:
        """Deltas since the last call: clock rollbacks, the largest step seen (ns), sequence exhaustions."""

    def issue_wait(self, scheme: str, seconds: float) -> None:
        """Time spent waiting for the clock (sequence exhausted, clock behind the high-water mark)."""

    def high_water_mark(self, scheme: str, unix_seconds: float) -> None:
        """The last recorded high-water mark of the scheme's identity, as Unix seconds."""

    # -- requests --------------------------------------------------------------------------------------------
    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One finished HTTP request: route template (bounded), method, status code, duration in seconds."""

    # -- leases ----------------------------------------------------------------------------------------------
    def lease_held(self, scheme: str, held: bool, identity: int | None) -> None:
        """Lease state per scheme and this node's bounded identity for it (``idmint_node_identity_info``)."""

    def lease_renewal(self, outcome: str) -> None:
        """One keepalive/refresh attempt: outcome is "ok", "late", "failed" or "lost"."""

    def lease_deadline(self, seconds_left: float) -> None:
        """Seconds left before this node fails closed."""

    def identity_refused(self, scheme: str, reason: str) -> None:
        """An identity was refused (its high-water mark is too far ahead of our clock)."""

    def render(self) -> tuple[bytes, str]:
        """The /metrics body and its content type."""
        return b"", "text/plain; version=0.0.4; charset=utf-8"

    def extra_state(self) -> dict[str, Any]:
        return {}
