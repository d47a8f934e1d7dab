"""One sequence's metrics: :class:`SequenceMetrics`, held by that sequence's buffer."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.metrics.collectors import Collectors

GAPLESS_EVENTS = ("reserve", "commit", "void", "expire")
"""The values of ``idmint_sequence_gapless_total{event}``."""


class SequenceMetrics:
    """One sequence's labelled children (every series initialised at 0 when the sequence is first used)."""

    __slots__ = (
        "issued",
        "buffer_ranges",
        "client_ranges",
        "range_ids",
        "gap",
        "buffered",
        "reservation_size",
        "storage_failures",
        "unavailable",
        "gapless",
        "outstanding",
    )

    def __init__(self, c: Collectors, name: str) -> None:
        self.issued = c.sequence_issued.labels(sequence=name)
        self.buffer_ranges = c.sequence_ranges.labels(sequence=name, kind="buffer")
        self.client_ranges = c.sequence_ranges.labels(sequence=name, kind="range")
        self.range_ids = c.sequence_range_ids.labels(sequence=name)
        self.gap = c.sequence_gap.labels(sequence=name)
        self.buffered = c.sequence_buffered.labels(sequence=name)
        self.reservation_size = c.sequence_reservation_size.labels(sequence=name)
        self.storage_failures = c.sequence_storage_failures.labels(sequence=name)
        self.unavailable = c.sequence_unavailable.labels(sequence=name)
        self.gapless = {event: c.sequence_gapless.labels(sequence=name, event=event) for event in GAPLESS_EVENTS}
        """Gapless events by kind (:data:`GAPLESS_EVENTS`), each initialised at 0."""
        self.outstanding = c.sequence_outstanding.labels(sequence=name)
