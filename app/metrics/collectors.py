"""The metric objects of idmint: every name, help text, label set, bucket layout and multiprocess mode, in one place.

Each :class:`Collectors` holds one of each metric; :class:`~app.metrics.Metrics` and the per-scheme and per-sequence
objects take their labelled children from it. Single-process: registered on the registry given; multiprocess:
unregistered (values live in the mmap files) and shared by the whole process (:func:`shared_collectors`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from app.metrics.tally import CountTally, RequestTally

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

REQUEST_DURATION_BUCKETS_SECONDS = (
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
"""Request latency buckets: four below one millisecond, so sub-millisecond quantiles resolve."""

ISSUE_WAIT_BUCKETS_SECONDS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Clock-wait buckets: from one 64-ID eight-byte millisecond up to the default max_clock_wait (5 s) and beyond."""


IDS_ISSUED = ("idmint_ids_issued_total", "IDs issued, by scheme.")
API_KEY_REQUESTS = (
    "idmint_api_key_requests_total",
    'Requests checked against the API keys, by key name (from the key file; "public" = served without a key, '
    '"unknown" = refused with 401) and outcome (allowed, unauthorized, forbidden, over_quota).',
)
API_KEY_IDS = ("idmint_api_key_ids_total", "IDs charged to each API key's quota, by key name.")
"""Name and help of the IDs issued counter (label scheme)."""
REQUESTS = ("idmint_requests_total", "Finished HTTP requests, by route template, method and status code.")
"""Name and help of the request counter (labels route, method, status)."""
REQUEST_DURATION = (
    "idmint_request_duration_seconds",
    "HTTP request duration in seconds, by route template and method.",
)
"""Name and help of the request duration histogram (labels route, method; :data:`REQUEST_DURATION_BUCKETS_SECONDS`)."""


class Collectors:
    """The metric objects. Single-process: registered on ``registry``, the IDs issued counted by a
    :class:`~app.metrics.tally.CountTally` and the request metrics by a :class:`~app.metrics.tally.RequestTally`
    (``request_tally``; ``requests`` and ``request_duration`` are None); multiprocess: unregistered (mmap files),
    ``request_tally`` None."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        r = registry
        self.ids_issued: Any
        self.requests: Counter | None = None
        self.request_duration: Histogram | None = None
        self.request_tally: RequestTally | None = None
        if r is None:
            self.ids_issued = Counter(*IDS_ISSUED, ["scheme"])
            self.requests = Counter(*REQUESTS, ["route", "method", "status"])
            self.request_duration = Histogram(
                *REQUEST_DURATION, ["route", "method"], buckets=REQUEST_DURATION_BUCKETS_SECONDS
            )
        else:  # a single process: plain-number tallies (app/metrics/tally.py), read at scrape time
            self.ids_issued = CountTally(*IDS_ISSUED, "scheme")
            self.request_tally = RequestTally(REQUEST_DURATION_BUCKETS_SECONDS, REQUESTS, REQUEST_DURATION)
            r.register(self.ids_issued)
            r.register(self.request_tally)
        self.lease_held = Gauge(
            "idmint_lease_held",
            "1 when this node holds an identity for the scheme and may issue, else 0 "
            "(several workers: the minimum over live workers).",
            ["scheme"],
            multiprocess_mode="livemin",
            registry=r,
        )
        self.lease_renewals = Counter(
            "idmint_lease_renewals_total",
            "Lease keepalive/refresh attempts, by outcome (ok, late, failed, lost).",
            ["outcome"],
            registry=r,
        )
        self.lease_deadline = Gauge(
            "idmint_lease_deadline_seconds",
            "Seconds left before this node fails closed (stops issuing); +Inf when the backend cannot expire "
            "(several workers: the minimum over live workers).",
            multiprocess_mode="livemin",
            registry=r,
        )
        self.node_identity = Gauge(
            "idmint_node_identity_info",
            "The node identity held per scheme (generator ID, medallion, publisher ID or shard); value 1 "
            "(0 for an identity given up, in multiprocess mode).",
            ["scheme", "identity"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.ledger_write_failures = Counter(
            "idmint_ledger_write_failures_total",
            "Claim ledger writes that failed (each is retried; issuing never waits for the ledger).",
            registry=r,
        )
        self.identity_refused = Counter(
            "idmint_identity_refused_total",
            "Identities refused because their high-water mark was too far ahead of this node's clock.",
            ["scheme"],
            registry=r,
        )
        self.clock_rollbacks = Counter(
            "idmint_clock_rollback_total",
            "Times the clock was seen below the last timestamp used, by scheme.",
            ["scheme"],
            registry=r,
        )
        self.clock_rollback_max = Gauge(
            "idmint_clock_rollback_seconds",
            "The largest backwards clock step seen, in seconds.",
            multiprocess_mode="max",
            registry=r,
        )
        self.backfill_ids = Counter(
            "idmint_backfill_ids_total",
            "IDs issued at past times (POST /v1/ids/{scheme}/backfill), by scheme.",
            ["scheme"],
            registry=r,
        )
        self.sequence_exhausted = Counter(
            "idmint_sequence_exhausted_total",
            "Times a per-tick sequence ran out and the generator had to wait or move time on, by scheme.",
            ["scheme"],
            registry=r,
        )
        self.issue_wait = Histogram(
            "idmint_issue_wait_seconds",
            "Time spent waiting for the clock before issuing (sequence exhausted, clock behind the "
            "high-water mark), in seconds.",
            ["scheme"],
            buckets=ISSUE_WAIT_BUCKETS_SECONDS,
            registry=r,
        )
        self.high_water_mark = Gauge(
            "idmint_high_water_mark_timestamp_seconds",
            "The last recorded high-water mark of the scheme's identity, as Unix seconds (0 = none yet).",
            ["scheme"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.id_space_end = Gauge(
            "idmint_id_space_end_timestamp_seconds",
            "When the scheme's timestamp field runs out (as this node is configured), as Unix seconds; +Inf for a "
            "scheme without time.",
            ["scheme"],
            multiprocess_mode="livemin",
            registry=r,
        )
        self.sequence_issued = Counter(
            "idmint_sequence_ids_issued_total",
            "Integers issued by /v1/sequences/{name}/next, by sequence.",
            ["sequence"],
            registry=r,
        )
        self.sequence_ranges = Counter(
            "idmint_sequence_ranges_total",
            "Ranges reserved in sequence storage, by sequence and kind (buffer: a node's own; range: a client's).",
            ["sequence", "kind"],
            registry=r,
        )
        self.sequence_range_ids = Counter(
            "idmint_sequence_range_ids_total",
            "Integers handed out by /v1/sequences/{name}/range, by sequence.",
            ["sequence"],
            registry=r,
        )
        self.sequence_gap = Counter(
            "idmint_sequence_gap_total",
            "Integers reserved by this node and never issued (a range dropped, or not handed back at a clean stop), "
            "by sequence.",
            ["sequence"],
            registry=r,
        )
        self.sequence_buffered = Gauge(
            "idmint_sequence_buffered",
            "Integers held in this node's in-memory ranges and not yet issued, by sequence.",
            ["sequence"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.sequence_reservation_size = Gauge(
            "idmint_sequence_reservation_size",
            "Integers this node reserves at once for its buffer (adapts between cache and 100 x cache).",
            ["sequence"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.sequence_storage_failures = Counter(
            "idmint_sequence_storage_failures_total",
            "Buffer reservations that failed because sequence storage was unreachable, by sequence.",
            ["sequence"],
            registry=r,
        )
        self.sequence_unavailable = Counter(
            "idmint_sequence_unavailable_total",
            "next requests refused with 503: the buffer ran out while storage was unreachable, by sequence.",
            ["sequence"],
            registry=r,
        )
        self.sequence_gapless = Counter(
            "idmint_sequence_gapless_total",
            "Gapless reservations made, committed, voided and expired by this node (expired: voided by this node's "
            "sweep or by a request that found them overdue), by sequence and event.",
            ["sequence", "event"],
            registry=r,
        )
        self.sequence_outstanding = Gauge(
            "idmint_sequence_reservations_outstanding",
            "Gapless reservations outstanding in the sequence's current period, as this node last saw them (the same "
            "figure on every node that saw it: take the max over nodes), by sequence.",
            ["sequence"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.build_info = Gauge(
            "idmint_build_info",
            "idmint build information; value 1.",
            ["version"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.region_configured = Gauge(
            "idmint_region_configured",
            "1 when IDMINT_REGIONS > 1 (this fleet's leased identities are a slice no other region's fleet claims), "
            "else 0; by lease backend and whether the server listens beyond loopback (exposed).",
            ["backend", "exposed"],
            multiprocess_mode="livemax",
            registry=r,
        )
        self.peer_fleet_up = Gauge(
            "idmint_peer_fleet_up",
            "1 when the last check of a peer fleet (IDMINT_PEER_FLEETS) got a fleet document, else 0; a peer never "
            "read keeps the guarded schemes not ready (several workers: the minimum over live workers).",
            ["peer"],
            multiprocess_mode="livemin",
            registry=r,
        )
        self.api_key_requests: Any
        self.api_key_ids: Any
        if r is None:
            self.api_key_requests = Counter(*API_KEY_REQUESTS, ["key", "outcome"])
            self.api_key_ids = Counter(*API_KEY_IDS, ["key"])
        else:  # counted on every keyed request: plain numbers in a single process, as ids_issued
            self.api_key_requests = CountTally(*API_KEY_REQUESTS, "key", "outcome")
            self.api_key_ids = CountTally(*API_KEY_IDS, "key")
            r.register(self.api_key_requests)
            r.register(self.api_key_ids)


_shared_lock = threading.Lock()
_shared: Collectors | None = None


def shared_collectors() -> Collectors:
    """Multiprocess mode: one set of metric objects per process (two sets would overwrite each other's files)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Collectors(None)
        return _shared
