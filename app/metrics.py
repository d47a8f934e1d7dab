"""Prometheus metrics for idmint (prometheus-client).

The rest of the app calls only the methods of :class:`Metrics`; they are cheap (a dict lookup and one locked add on
a cached labelled child) and are called per batch or per request, never per ID.

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
    idmint_issue_wait_seconds{scheme}                     histogram  time spent waiting for the clock
    idmint_high_water_mark_timestamp_seconds{scheme}      gauge      last recorded high-water mark, Unix seconds
    idmint_build_info{version}                            gauge = 1
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

Nothing here imports prometheus-client at module import time: ``idmint serve`` imports this module to call
:func:`prepare_process_environment` first.
"""

from __future__ import annotations

import atexit
import glob
import os
import re
import shutil
import sys
import tempfile
import threading
from typing import TYPE_CHECKING, Any

from app.errors import ConfigError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The environment variable prometheus-client reads, at import time, to choose multiprocess mode."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus text exposition format 0.0.4 (what prometheus-client sends when no other format is negotiated)."""

REQUEST_DURATION_BUCKETS_SECONDS = (
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
)
"""Request latency buckets: four below one millisecond, so sub-millisecond quantiles resolve."""

ISSUE_WAIT_BUCKETS_SECONDS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
"""Clock-wait buckets: from one 64-ID eight-byte millisecond up to the default max_clock_wait (5 s) and beyond."""

LEASE_RENEWAL_OUTCOMES = ("ok", "late", "failed", "lost")
"""Bounded values of ``idmint_lease_renewals_total{outcome}``."""

HTTP_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"))
"""Methods counted under their own name in the request metrics; any other is counted as ``other``."""
OTHER_METHOD = "other"

NS_PER_SECOND = 1_000_000_000

_DB_FILE = re.compile(r"^(?:counter|histogram|summary|gauge_[a-z]+)_(\d+)\.db$")
_LIVE_GAUGE_FILE = re.compile(r"^gauge_live[a-z]+_(\d+)\.db$")


# -- process environment (called by `idmint serve` before uvicorn starts) -----------------------------------------


def prepare_process_environment(workers: int) -> None:
    """Set up prometheus-client's multiprocess mode for ``idmint serve``, as its docs say, when it is needed.

    Multiprocess mode is used when ``workers > 1`` or when the operator already set ``PROMETHEUS_MULTIPROC_DIR``
    (the docs' preferred way: from the start-up script or the container's environment). Without a preset
    directory, a fresh temporary one is created and exported through ``os.environ`` so that the uvicorn workers,
    which are spawned after this call, inherit it; it is removed when this (supervisor) process exits. Either way
    the directory is wiped of earlier runs' ``*.db`` files ("must be wiped between process runs, before startup is
    recommended"). With one worker and no preset directory nothing is done: the in-process registry is exact and
    keeps the process metrics.

    Must run before prometheus-client is imported in this process: it reads the variable once, at import. Raises
    :class:`~app.errors.ConfigError` when that order was broken, or when ``workers < 1``.
    """
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    preset = os.environ.get(MULTIPROC_ENV)
    if workers == 1 and not preset:
        return
    if "prometheus_client.values" in sys.modules:
        from prometheus_client import values

        if not getattr(values.ValueClass, "_multiprocess", False):
            raise ConfigError(
                f"{MULTIPROC_ENV} must be set before prometheus_client is imported; "
                "call app.metrics.prepare_process_environment() first"
            )
    if preset:
        os.makedirs(preset, exist_ok=True)
        wipe_multiprocess_dir(preset)
        return
    path = tempfile.mkdtemp(prefix="idmint-metrics-")
    os.environ[MULTIPROC_ENV] = path
    owner = os.getpid()

    def _remove() -> None:
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(_remove)


def wipe_multiprocess_dir(path: str) -> int:
    """Delete prometheus-client's ``*.db`` files from ``path`` (an earlier run's values); returns how many."""
    removed = 0
    for name in os.listdir(path):
        if _DB_FILE.match(name):
            try:
                os.remove(os.path.join(path, name))
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def multiprocess_dir() -> str | None:
    """The multiprocess directory if multiprocess mode is on in this process, else None."""
    return os.environ.get(MULTIPROC_ENV) or None


def worker_exit(pid: int) -> None:
    """Bookkeeping when a worker process ``pid`` has exited: drop its live gauges (``mark_process_dead``).

    The equivalent of the docs' Gunicorn ``child_exit`` hook, for the supervisor that started the workers to call
    after it reaped one. Does nothing in single-process mode.
    """
    path = multiprocess_dir()
    if path is None:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap_dead_processes(path: str) -> None:
    """``mark_process_dead`` for every process that left live-gauge files behind and no longer exists."""
    pids = set()
    for file in glob.glob(os.path.join(path, "gauge_live*_*.db")):
        match = _LIVE_GAUGE_FILE.match(os.path.basename(file))
        if match:
            pids.add(int(match.group(1)))
    own = os.getpid()
    dead = [pid for pid in pids if pid != own and not _pid_alive(pid)]
    if dead:
        from prometheus_client import multiprocess

        for pid in dead:
            multiprocess.mark_process_dead(pid, path)


# -- collectors -------------------------------------------------------------------------------------------------


class _Collectors:
    """The metric objects. Single-process: registered on ``registry``; multiprocess: unregistered (mmap files)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        r = registry
        self.ids_issued = Counter(
            "idmint_ids_issued_total", "IDs issued, by scheme.", ["scheme"], registry=r
        )
        self.requests = Counter(
            "idmint_requests_total",
            "Finished HTTP requests, by route template, method and status code.",
            ["route", "method", "status"], registry=r,
        )
        self.request_duration = Histogram(
            "idmint_request_duration_seconds",
            "HTTP request duration in seconds, by route template and method.",
            ["route", "method"], buckets=REQUEST_DURATION_BUCKETS_SECONDS, registry=r,
        )
        self.lease_held = Gauge(
            "idmint_lease_held",
            "1 when this node holds an identity for the scheme and may issue, else 0 "
            "(several workers: the minimum over live workers).",
            ["scheme"], multiprocess_mode="livemin", registry=r,
        )
        self.lease_renewals = Counter(
            "idmint_lease_renewals_total",
            "Lease keepalive/refresh attempts, by outcome (ok, late, failed, lost).",
            ["outcome"], registry=r,
        )
        self.lease_deadline = Gauge(
            "idmint_lease_deadline_seconds",
            "Seconds left before this node fails closed (stops issuing); +Inf when the backend cannot expire "
            "(several workers: the minimum over live workers).",
            multiprocess_mode="livemin", registry=r,
        )
        self.node_identity = Gauge(
            "idmint_node_identity_info",
            "The node identity held per scheme (generator ID, medallion, publisher ID or shard); value 1 "
            "(0 for an identity given up, in multiprocess mode).",
            ["scheme", "identity"], multiprocess_mode="livemax", registry=r,
        )
        self.identity_refused = Counter(
            "idmint_identity_refused_total",
            "Identities refused because their high-water mark was too far ahead of this node's clock.",
            ["scheme"], registry=r,
        )
        self.clock_rollbacks = Counter(
            "idmint_clock_rollback_total",
            "Times the clock was seen below the last timestamp used, by scheme.",
            ["scheme"], registry=r,
        )
        self.clock_rollback_max = Gauge(
            "idmint_clock_rollback_seconds",
            "The largest backwards clock step seen, in seconds.",
            multiprocess_mode="max", registry=r,
        )
        self.sequence_exhausted = Counter(
            "idmint_sequence_exhausted_total",
            "Times a per-tick sequence ran out and the generator had to wait or move time on, by scheme.",
            ["scheme"], registry=r,
        )
        self.issue_wait = Histogram(
            "idmint_issue_wait_seconds",
            "Time spent waiting for the clock before issuing (sequence exhausted, clock behind the "
            "high-water mark), in seconds.",
            ["scheme"], buckets=ISSUE_WAIT_BUCKETS_SECONDS, registry=r,
        )
        self.high_water_mark = Gauge(
            "idmint_high_water_mark_timestamp_seconds",
            "The last recorded high-water mark of the scheme's identity, as Unix seconds (0 = none yet).",
            ["scheme"], multiprocess_mode="livemax", registry=r,
        )
        self.sequence_issued = Counter(
            "idmint_sequence_ids_issued_total", "Integers issued by /v1/sequences/{name}/next, by sequence.",
            ["sequence"], registry=r,
        )
        self.sequence_ranges = Counter(
            "idmint_sequence_ranges_total",
            "Ranges reserved in sequence storage, by sequence and kind (buffer: a node's own; range: a client's).",
            ["sequence", "kind"], registry=r,
        )
        self.sequence_range_ids = Counter(
            "idmint_sequence_range_ids_total", "Integers handed out by /v1/sequences/{name}/range, by sequence.",
            ["sequence"], registry=r,
        )
        self.sequence_gap = Counter(
            "idmint_sequence_gap_total",
            "Integers reserved by this node and never issued (unused buffer discarded at stop), by sequence.",
            ["sequence"], registry=r,
        )
        self.sequence_buffered = Gauge(
            "idmint_sequence_buffered",
            "Integers held in this node's in-memory ranges and not yet issued, by sequence.",
            ["sequence"], multiprocess_mode="livesum", registry=r,
        )
        self.sequence_reservation_size = Gauge(
            "idmint_sequence_reservation_size",
            "Integers this node reserves at once for its buffer (adapts between cache and 100 x cache).",
            ["sequence"], multiprocess_mode="livemax", registry=r,
        )
        self.sequence_storage_failures = Counter(
            "idmint_sequence_storage_failures_total",
            "Buffer reservations that failed because sequence storage was unreachable, by sequence.",
            ["sequence"], registry=r,
        )
        self.sequence_unavailable = Counter(
            "idmint_sequence_unavailable_total",
            "next requests refused with 503: the buffer ran out while storage was unreachable, by sequence.",
            ["sequence"], registry=r,
        )
        self.build_info = Gauge(
            "idmint_build_info", "idmint build information; value 1.", ["version"],
            multiprocess_mode="livemax", registry=r,
        )
        self.api_key_requests = Counter(
            "idmint_api_key_requests_total",
            "Requests checked against the API keys, by key name (from the key file; \"public\" = served without "
            "a key, \"unknown\" = refused with 401) and outcome (allowed, unauthorized, forbidden, over_quota).",
            ["key", "outcome"], registry=r,
        )
        self.api_key_ids = Counter(
            "idmint_api_key_ids_total", "IDs charged to each API key's quota, by key name.", ["key"], registry=r,
        )


_shared_lock = threading.Lock()
_shared: _Collectors | None = None


def _shared_collectors() -> _Collectors:
    """Multiprocess mode: one set of metric objects per process (two sets would overwrite each other's files)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = _Collectors(None)
        return _shared


class SequenceMetrics:
    """One sequence's labelled children (every series initialised at 0 when the sequence is first used)."""

    __slots__ = ("issued", "buffer_ranges", "client_ranges", "range_ids", "gap", "buffered", "reservation_size",
                 "storage_failures", "unavailable")

    def __init__(self, c: _Collectors, name: str) -> None:
        self.issued = c.sequence_issued.labels(sequence=name)
        self.buffer_ranges = c.sequence_ranges.labels(sequence=name, kind="buffer")
        self.client_ranges = c.sequence_ranges.labels(sequence=name, kind="range")
        self.range_ids = c.sequence_range_ids.labels(sequence=name)
        self.gap = c.sequence_gap.labels(sequence=name)
        self.buffered = c.sequence_buffered.labels(sequence=name)
        self.reservation_size = c.sequence_reservation_size.labels(sequence=name)
        self.storage_failures = c.sequence_storage_failures.labels(sequence=name)
        self.unavailable = c.sequence_unavailable.labels(sequence=name)


# -- facade -----------------------------------------------------------------------------------------------------


class Metrics:
    """Facade over the process's Prometheus collectors. One instance per app.

    ``scheme_names`` are initialised up front (every per-scheme series exists at 0 from the first scrape), as are
    the lease renewal outcomes. Labelled children are cached, so each call costs a dict lookup and an add.
    """

    def __init__(self, scheme_names: list[str], version: str) -> None:
        from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

        self.scheme_names = scheme_names
        self.version = version
        self._multiprocess_dir = multiprocess_dir()
        if self._multiprocess_dir is not None:
            from prometheus_client import values

            if not getattr(values.ValueClass, "_multiprocess", False):
                raise ConfigError(
                    f"{MULTIPROC_ENV} was set after prometheus_client was imported; set it before the process "
                    "starts (idmint serve does, through app.metrics.prepare_process_environment)"
                )
            self._registry: CollectorRegistry | None = None
            self._c = _shared_collectors()
        else:
            self._registry = CollectorRegistry()
            ProcessCollector(registry=self._registry)
            PlatformCollector(registry=self._registry)
            GCCollector(registry=self._registry)
            self._c = _Collectors(self._registry)

        c = self._c
        self._lock = threading.Lock()
        self._issued: dict[str, Any] = {}
        self._rollbacks: dict[str, Any] = {}
        self._exhausted: dict[str, Any] = {}
        self._wait: dict[str, Any] = {}
        self._held: dict[str, Any] = {}
        self._hwm: dict[str, Any] = {}
        self._refused: dict[str, Any] = {}
        self._identities: dict[str, set[int]] = {}
        self._requests: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._key_requests: dict[tuple[str, str], Any] = {}
        self._key_ids: dict[str, Any] = {}
        self._sequences: dict[str, SequenceMetrics] = {}
        self._renewals = {outcome: c.lease_renewals.labels(outcome=outcome) for outcome in LEASE_RENEWAL_OUTCOMES}
        self._max_rollback_seconds = 0.0
        for scheme in scheme_names:
            self._scheme_children(scheme)
        c.build_info.labels(version=version).set(1)

    def _scheme_children(self, scheme: str) -> None:
        c = self._c
        with self._lock:
            if scheme in self._issued:
                return
            self._rollbacks[scheme] = c.clock_rollbacks.labels(scheme=scheme)
            self._exhausted[scheme] = c.sequence_exhausted.labels(scheme=scheme)
            self._wait[scheme] = c.issue_wait.labels(scheme=scheme)
            self._held[scheme] = c.lease_held.labels(scheme=scheme)
            self._hwm[scheme] = c.high_water_mark.labels(scheme=scheme)
            self._refused[scheme] = c.identity_refused.labels(scheme=scheme)
            self._identities[scheme] = set()
            self._issued[scheme] = c.ids_issued.labels(scheme=scheme)  # last: marks the scheme as initialised

    # -- issuing ---------------------------------------------------------------------------------------------
    def ids_issued(self, scheme: str, count: int) -> None:
        """``idmint_ids_issued_total{scheme}`` += count (called once per batch)."""
        child = self._issued.get(scheme)
        if child is None:
            self._scheme_children(scheme)
            child = self._issued[scheme]
        if count:
            child.inc(count)

    def generator_stats(self, scheme: str, rollbacks: int, max_rollback_ns: int, exhausted: int) -> None:
        """Deltas since the last call: clock rollbacks, the largest step seen (ns), sequence exhaustions."""
        if scheme not in self._issued:
            self._scheme_children(scheme)
        if rollbacks:
            self._rollbacks[scheme].inc(rollbacks)
        if exhausted:
            self._exhausted[scheme].inc(exhausted)
        if max_rollback_ns:
            seconds = max_rollback_ns / NS_PER_SECOND
            if seconds > self._max_rollback_seconds:
                self._max_rollback_seconds = seconds
                self._c.clock_rollback_max.set(seconds)

    def issue_wait(self, scheme: str, seconds: float) -> None:
        """Time spent waiting for the clock (sequence exhausted, clock behind the high-water mark)."""
        if scheme not in self._issued:
            self._scheme_children(scheme)
        self._wait[scheme].observe(seconds)

    def high_water_mark(self, scheme: str, unix_seconds: float) -> None:
        """The last recorded high-water mark of the scheme's identity, as Unix seconds."""
        if scheme not in self._issued:
            self._scheme_children(scheme)
        self._hwm[scheme].set(unix_seconds)

    # -- requests --------------------------------------------------------------------------------------------
    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One finished HTTP request: route template (bounded), method, status code, duration in seconds.

        ``route`` must be the matched route's template (``/v1/ids/{scheme}``), never the raw path; requests that
        match no route should pass one fixed placeholder, so that the label stays bounded.
        """
        if method not in HTTP_METHODS:
            method = OTHER_METHOD
        key = (route, method, status)
        children = self._requests.get(key)
        if children is None:
            with self._lock:
                children = self._requests.get(key)
                if children is None:
                    children = (
                        self._c.requests.labels(route=route, method=method, status=str(status)),
                        self._c.request_duration.labels(route=route, method=method),
                    )
                    self._requests[key] = children
        counter, histogram = children
        counter.inc()
        histogram.observe(seconds)

    # -- API keys --------------------------------------------------------------------------------------------
    def api_keys(self, names: list[str], outcomes: tuple[str, ...]) -> None:
        """Initialise the per-key series for ``names`` (the key file's names: a bounded set) at 0."""
        c = self._c
        with self._lock:
            for name in names:
                for outcome in outcomes:
                    if (name, outcome) not in self._key_requests:
                        self._key_requests[(name, outcome)] = c.api_key_requests.labels(key=name, outcome=outcome)
                if name not in self._key_ids:
                    self._key_ids[name] = c.api_key_ids.labels(key=name)

    def api_key_request(self, name: str, outcome: str) -> None:
        """One request checked for key ``name`` (initialised by :meth:`api_keys`) with ``outcome``."""
        self._key_requests[(name, outcome)].inc()

    def api_key_ids(self, name: str, count: int) -> None:
        """``count`` IDs charged to key ``name``."""
        self._key_ids[name].inc(count)

    # -- leases ----------------------------------------------------------------------------------------------
    def lease_held(self, scheme: str, held: bool, identity: int | None) -> None:
        """Lease state per scheme and this node's bounded identity for it (``idmint_node_identity_info``).

        Call once per claim: ``held=True`` with the identity claimed (several calls add several identities, e.g.
        eight-byte nodes holding several generator IDs); ``held=False`` with that identity when it is lost or
        released, or with ``None`` to drop every identity of the scheme. ``idmint_lease_held{scheme}`` is 1 while
        at least one identity is held (or, for a scheme without identities such as Wiji, after ``held=True``
        with ``None``).
        """
        if scheme not in self._issued:
            self._scheme_children(scheme)
        with self._lock:
            identities = self._identities[scheme]
            if held:
                if identity is not None and identity not in identities:
                    identities.add(identity)
                    self._c.node_identity.labels(scheme=scheme, identity=str(identity)).set(1)
                self._held[scheme].set(1)
                return
            dropped = set(identities) if identity is None else ({identity} & identities)
            for gone in dropped:
                identities.discard(gone)
                self._drop_identity(scheme, gone)
            self._held[scheme].set(1 if identities else 0)

    def _drop_identity(self, scheme: str, identity: int) -> None:
        if self._multiprocess_dir is None:
            try:
                self._c.node_identity.remove(scheme, str(identity))
            except KeyError:
                pass
        else:  # remove() is not supported in multiprocess mode
            self._c.node_identity.labels(scheme=scheme, identity=str(identity)).set(0)

    def lease_renewal(self, outcome: str) -> None:
        """One keepalive/refresh attempt: outcome is "ok", "late", "failed" or "lost"."""
        child = self._renewals.get(outcome)
        if child is None:
            raise ValueError(f"outcome must be one of {', '.join(LEASE_RENEWAL_OUTCOMES)}, got {outcome!r}")
        child.inc()

    def lease_deadline(self, seconds_left: float) -> None:
        """Seconds left before this node fails closed."""
        self._c.lease_deadline.set(max(0.0, seconds_left))

    def identity_refused(self, scheme: str, reason: str) -> None:
        """An identity was refused (its high-water mark is too far ahead of our clock).

        ``reason`` is for the caller's log line; it is not a label (it is free text, and labels must be bounded).
        """
        if scheme not in self._issued:
            self._scheme_children(scheme)
        self._refused[scheme].inc()

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
        from prometheus_client import CollectorRegistry, multiprocess

        assert self._multiprocess_dir is not None
        _reap_dead_processes(self._multiprocess_dir)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=self._multiprocess_dir)
        return registry

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
