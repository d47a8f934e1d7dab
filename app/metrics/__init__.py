"""Prometheus metrics for idmint (prometheus-client).

The rest of the app calls only the methods of :class:`Metrics` and of the objects it hands out: one
:class:`~app.metrics.scheme.SchemeMetrics` per scheme (each issuer holds its scheme's) and one
:class:`~app.metrics.sequence.SequenceMetrics` per sequence, whose labelled children are created up front. Each call
is one add or set on a child, made per batch or per request, never per ID.

Modules: :mod:`~app.metrics.collectors` (every metric's name, help, labels, buckets), :mod:`~app.metrics.scheme`,
:mod:`~app.metrics.sequence`, :mod:`~app.metrics.multiprocess` (prometheus-client's multiprocess-directory
plumbing).

Metric set (namespace ``idmint_``, base units, bounded labels; never an ID in a label)::

    idmint_ids_issued_total{scheme}                       counter    IDs issued (one inc per batch)
    idmint_requests_total{route,method,status}            counter    finished HTTP requests (route = template)
    idmint_request_duration_seconds{route,method}         histogram  request latency, 100 µs .. 60 s buckets
    idmint_lease_held{scheme}                             gauge 0/1  this node holds an identity for the scheme
    idmint_lease_renewals_total{outcome}                  counter    keepalives: ok, late, failed, lost
    idmint_lease_deadline_seconds                         gauge      seconds left before this node fails closed
    idmint_node_identity_info{scheme,identity}            gauge = 1  generator ID / medallion / publisher ID / shard
    idmint_identity_refused_total{scheme}                 counter    identities refused (high-water mark too far ahead)
    idmint_clock_rollback_total{scheme}                   counter    clock seen below the last timestamp used
    idmint_clock_rollback_seconds                         gauge      largest backwards clock step seen
    idmint_sequence_exhausted_total{scheme}               counter    per-tick sequence ran out
    idmint_backfill_ids_total{scheme}                     counter    IDs issued at past times (backfill)
    idmint_issue_wait_seconds{scheme}                     histogram  time spent waiting for the clock
    idmint_high_water_mark_timestamp_seconds{scheme}      gauge      last recorded high-water mark, Unix seconds
    idmint_build_info{version}                            gauge = 1
    idmint_id_space_end_timestamp_seconds{scheme}         gauge      when the scheme's timestamp runs out (+Inf: never)
    idmint_region_configured{backend,exposed}             gauge 0/1  IDMINT_REGIONS > 1 (identities sliced by region)
    idmint_peer_fleet_up{peer}                            gauge 0/1  the last check of an IDMINT_PEER_FLEETS server got
                                                                     a fleet document
    idmint_api_key_requests_total{key,outcome}            counter    requests checked by API key (key names come from
                                                                     the key file, plus "public" and "unknown")
    idmint_api_key_ids_total{key}                         counter    IDs charged to each API key's quota
    idmint_sequence_ids_issued_total{sequence}            counter    integers issued by `next` (one inc per request)
    idmint_sequence_ranges_total{sequence,kind}           counter    ranges reserved in storage: buffer, range
    idmint_sequence_range_ids_total{sequence}             counter    integers handed out by `range` requests
    idmint_sequence_gap_total{sequence}                   counter    integers reserved and never issued (gaps)
    idmint_sequence_buffered{sequence}                    gauge      integers held in this node's buffer, unused
    idmint_sequence_reservation_size{sequence}            gauge      current buffer reservation size (adaptive)
    idmint_sequence_storage_failures_total{sequence}      counter    reservations that failed (storage unreachable)
    idmint_sequence_unavailable_total{sequence}           counter    `next` answered 503: buffer empty, storage down
    idmint_sequence_gapless_total{sequence,event}         counter    gapless reserve, commit, void, expire (this node)
    idmint_sequence_reservations_outstanding{sequence}    gauge      gapless reservations outstanding (current period)
    process_*, python_*                                   default process, platform and GC collectors
                                                          (single-process mode only, see below)

Two modes, chosen by the environment exactly as prometheus-client's "Multiprocess Mode" docs say
(https://prometheus.github.io/client_python/multiprocess/):

* **Single process** (``PROMETHEUS_MULTIPROC_DIR`` unset): every :class:`Metrics` instance has its own
  :class:`~prometheus_client.CollectorRegistry` (tests build several apps in one process) with the default process,
  platform and GC collectors registered on it.
* **Multiprocess** (``idmint serve --workers N`` with N > 1, or ``PROMETHEUS_MULTIPROC_DIR`` set by the operator):
  :func:`prepare_process_environment` sets and wipes the directory before uvicorn starts and before
  prometheus-client is imported; metrics are created unregistered (their values live in the directory's mmap
  files), and each scrape builds a fresh registry holding a ``MultiProcessCollector``. Gauges carry a
  ``multiprocess_mode`` that says how the workers' values combine. Custom collectors do not work in this mode, so the
  process/platform/GC metrics are absent. When a worker exits, :func:`worker_exit` (``mark_process_dead``) drops its
  live gauges; the CLI's supervisor calls it, and each scrape also sweeps live-gauge files of processes that no
  longer exist (uvicorn has no ``child_exit`` hook, and a SIGKILLed worker calls nothing).

Nothing here imports prometheus-client at module import time: ``idmint serve`` imports this package to call
:func:`prepare_process_environment` first (re-exported here from :mod:`~app.metrics.multiprocess`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.metrics.collectors import (
    ISSUE_WAIT_BUCKETS_SECONDS,
    REQUEST_DURATION_BUCKETS_SECONDS,
    Collectors,
    shared_collectors,
)
from app.metrics.multiprocess import (
    MULTIPROC_ENV,
    multiprocess_dir,
    prepare_process_environment,
    require_multiprocess_values,
    scrape_registry,
    wipe_multiprocess_dir,
    worker_exit,
)
from app.metrics.scheme import LargestRollback, SchemeMetrics
from app.metrics.sequence import SequenceMetrics
from app.metrics.tally import CountTally

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "CONTENT_TYPE",
    "HTTP_METHODS",
    "ISSUE_WAIT_BUCKETS_SECONDS",
    "LEASE_RENEWAL_OUTCOMES",
    "MULTIPROC_ENV",
    "OTHER_METHOD",
    "REQUEST_DURATION_BUCKETS_SECONDS",
    "Metrics",
    "SchemeMetrics",
    "SequenceMetrics",
    "multiprocess_dir",
    "prepare_process_environment",
    "wipe_multiprocess_dir",
    "worker_exit",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus text exposition format 0.0.4 (what prometheus-client sends when no other format is negotiated)."""

LEASE_RENEWAL_OUTCOMES = ("ok", "late", "failed", "lost")
"""Bounded values of ``idmint_lease_renewals_total{outcome}``."""

HTTP_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"))
"""Methods counted under their own name in the request metrics; any other is counted as ``other``."""
OTHER_METHOD = "other"


class Metrics:
    """Facade over the process's Prometheus collectors. One instance per app.

    ``scheme_names`` get their :class:`SchemeMetrics` up front (every per-scheme series exists at 0 from the first
    scrape), as do the lease renewal outcomes; :meth:`scheme` hands each issuer its scheme's.
    """

    def __init__(self, scheme_names: list[str], version: str) -> None:
        from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

        self.scheme_names = scheme_names
        self.version = version
        self._multiprocess_dir = multiprocess_dir()
        self._tally: Callable[[str, str, int, float], None] | None = None
        if self._multiprocess_dir is not None:
            require_multiprocess_values()
            self._registry: CollectorRegistry | None = None
            self._c = shared_collectors()
        else:
            self._registry = CollectorRegistry()
            ProcessCollector(registry=self._registry)
            PlatformCollector(registry=self._registry)
            GCCollector(registry=self._registry)
            self._c = Collectors(self._registry)

        c = self._c
        if c.request_tally is not None:
            self._tally = c.request_tally.observe
        self._lock = threading.Lock()
        self._largest_rollback = LargestRollback(c)
        self._schemes: dict[str, SchemeMetrics] = {}
        self._requests: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._key_requests: dict[tuple[str, str], Any] = {}
        self._key_ids: dict[str, Any] = {}
        self._sequences: dict[str, SequenceMetrics] = {}
        self._renewals = {outcome: c.lease_renewals.labels(outcome=outcome) for outcome in LEASE_RENEWAL_OUTCOMES}
        for scheme in scheme_names:
            self.scheme(scheme)
        c.build_info.labels(version=version).set(1)

    def scheme(self, name: str) -> SchemeMetrics:
        """The metrics of scheme ``name`` (its series created at 0 on first use, when not named up front)."""
        with self._lock:
            metrics = self._schemes.get(name)
            if metrics is None:
                metrics = self._schemes[name] = SchemeMetrics(
                    self._c, name, self._largest_rollback, self._multiprocess_dir is not None
                )
            return metrics

    # -- requests --------------------------------------------------------------------------------------------
    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One finished HTTP request: route template (bounded), method, status code, duration in seconds.

        ``route`` must be the matched route's template (``/v1/ids/{scheme}``), never the raw path; requests that
        match no route should pass one fixed placeholder, so that the label stays bounded.
        """
        if method not in HTTP_METHODS:
            method = OTHER_METHOD
        if self._tally is not None:
            self._tally(route, method, status, seconds)
            return
        key = (route, method, status)
        children = self._requests.get(key)
        if children is None:
            with self._lock:
                children = self._requests.get(key)
                if children is None:
                    assert self._c.requests is not None and self._c.request_duration is not None
                    children = (
                        self._c.requests.labels(route=route, method=method, status=str(status)),
                        self._c.request_duration.labels(route=route, method=method),
                    )
                    self._requests[key] = children
        counter, histogram = children
        counter.inc()
        histogram.observe(seconds)

    def request_recorder(self) -> Callable[[str, str, int, float], None]:
        """:meth:`request` for a caller whose every method is one of :data:`HTTP_METHODS` (a hot route's), bound
        once: in a single process the request tally's own ``observe``, one call less per request."""
        return self._tally if self._tally is not None else self.request

    # -- API keys --------------------------------------------------------------------------------------------
    def api_keys(self, names: list[str], outcomes: tuple[str, ...]) -> None:
        """Initialise the per-key series for ``names`` (the key file's names: a bounded set) at 0."""
        c = self._c
        with self._lock:
            for name in names:
                for outcome in outcomes:
                    if (name, outcome) not in self._key_requests:
                        requests = c.api_key_requests
                        self._key_requests[(name, outcome)] = (
                            requests.child(name, outcome)
                            if isinstance(requests, CountTally)
                            else requests.labels(key=name, outcome=outcome)
                        )
                if name not in self._key_ids:
                    ids = c.api_key_ids
                    self._key_ids[name] = ids.child(name) if isinstance(ids, CountTally) else ids.labels(key=name)

    def api_key_request(self, name: str, outcome: str) -> None:
        """One request checked for key ``name`` (initialised by :meth:`api_keys`) with ``outcome``."""
        self._key_requests[(name, outcome)].inc()

    def api_key_ids(self, name: str, count: int) -> None:
        """``count`` IDs charged to key ``name``."""
        self._key_ids[name].inc(count)

    def api_key_counter(self, name: str, outcome: str) -> Callable[[], None]:
        """The one-request counter of key ``name`` and ``outcome`` (initialised by :meth:`api_keys`): what
        :meth:`api_key_request` does, bound once for a caller that counts on every request."""
        return self._key_requests[(name, outcome)].inc  # type: ignore[no-any-return]

    def api_key_ids_counter(self, name: str) -> Callable[[int], None]:
        """``count`` -> :meth:`api_key_ids` of key ``name``, bound once."""
        return self._key_ids[name].inc  # type: ignore[no-any-return]

    # -- leases ----------------------------------------------------------------------------------------------
    def ledger_write_failed(self) -> None:
        """One claim ledger write failed (it is retried)."""
        self._c.ledger_write_failures.inc()

    def lease_renewal(self, outcome: str) -> None:
        """One keepalive/refresh attempt: outcome is "ok", "late", "failed" or "lost"."""
        child = self._renewals.get(outcome)
        if child is None:
            raise ValueError(f"outcome must be one of {', '.join(LEASE_RENEWAL_OUTCOMES)}, got {outcome!r}")
        child.inc()

    def lease_deadline(self, seconds_left: float) -> None:
        """Seconds left before this node fails closed."""
        self._c.lease_deadline.set(max(0.0, seconds_left))

    def region_configured(self, configured: bool, backend: str, exposed: bool) -> None:
        """``idmint_region_configured{backend, exposed}``: 1 when IDMINT_REGIONS > 1. ``exposed``: the server
        listens on an address other than loopback (then another fleet's clients can reach it)."""
        self._c.region_configured.labels(backend=backend, exposed="true" if exposed else "false").set(int(configured))

    def peer_fleet_up(self, peer: str, up: bool) -> None:
        """``idmint_peer_fleet_up{peer}``: 1 when the last check of ``peer`` (an IDMINT_PEER_FLEETS URL: a bounded
        label) got a well-formed fleet document, else 0."""
        self._c.peer_fleet_up.labels(peer=peer).set(int(up))

    # -- sequences -------------------------------------------------------------------------------------------
    def sequence(self, name: str) -> SequenceMetrics:
        """The cached children of one sequence's metrics. Names come from storage, which caps how many exist
        (IDMINT_MAX_SEQUENCES), so the label stays bounded."""
        children = self._sequences.get(name)
        if children is None:
            with self._lock:
                children = self._sequences.get(name)
                if children is None:
                    children = self._sequences[name] = SequenceMetrics(self._c, name)
        return children

    # -- exposition ------------------------------------------------------------------------------------------
    @property
    def multiprocess(self) -> bool:
        """True when values live in ``PROMETHEUS_MULTIPROC_DIR`` and scrapes aggregate every worker."""
        return self._multiprocess_dir is not None

    @property
    def registry(self) -> CollectorRegistry:
        """The registry a scrape reads: this instance's own, or (multiprocess) a fresh one with a
        ``MultiProcessCollector`` over every worker's files. Tests read samples with ``get_sample_value``."""
        if self._registry is not None:
            return self._registry
        assert self._multiprocess_dir is not None
        return scrape_registry(self._multiprocess_dir)

    def render(self) -> tuple[bytes, str]:
        """The /metrics body and its content type."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry), CONTENT_TYPE

    def extra_state(self) -> dict[str, Any]:
        """How metrics are collected in this process (for status endpoints)."""
        return {
            "metrics_mode": "multiprocess" if self.multiprocess else "single-process",
            "multiprocess_dir": self._multiprocess_dir,
        }
