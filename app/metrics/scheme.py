"""One scheme's metrics: :class:`SchemeMetrics`, held by that scheme's issuer and identity holder."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.metrics.tally import CountTally

if TYPE_CHECKING:
    from app.metrics.collectors import Collectors

NS_PER_SECOND = 1_000_000_000


class LargestRollback:
    """``idmint_clock_rollback_seconds``: the largest backwards clock step seen by any scheme of this process."""

    __slots__ = ("_gauge", "seconds")

    def __init__(self, c: Collectors) -> None:
        self._gauge = c.clock_rollback_max
        self.seconds = 0.0

    def observe(self, seconds: float) -> None:
        if seconds > self.seconds:
            self.seconds = seconds
            self._gauge.set(seconds)


class SchemeMetrics:
    """One scheme's labelled children (``{scheme="..."}``), every one created by the constructor, so that each
    series exists at 0 from the first scrape and each call is one add or set on a child."""

    __slots__ = (
        "scheme",
        "_issued",
        "ids_issued",
        "_rollbacks",
        "_exhausted",
        "_backfill",
        "_wait",
        "_held",
        "_hwm",
        "_space_end",
        "_refused",
        "_node_identity",
        "_identities",
        "_largest_rollback",
        "_multiprocess",
        "_lock",
    )

    def __init__(self, c: Collectors, scheme: str, largest_rollback: LargestRollback, multiprocess: bool) -> None:
        self.scheme = scheme
        self._rollbacks = c.clock_rollbacks.labels(scheme=scheme)
        self._exhausted = c.sequence_exhausted.labels(scheme=scheme)
        self._backfill = c.backfill_ids.labels(scheme=scheme)
        self._wait = c.issue_wait.labels(scheme=scheme)
        self._held = c.lease_held.labels(scheme=scheme)
        self._hwm = c.high_water_mark.labels(scheme=scheme)
        self._space_end = c.id_space_end.labels(scheme=scheme)
        self._refused = c.identity_refused.labels(scheme=scheme)
        issued = c.ids_issued
        self._issued = issued.child(scheme) if isinstance(issued, CountTally) else issued.labels(scheme=scheme)
        self.ids_issued: Callable[[int], None] = self._issued.inc
        """``idmint_ids_issued_total{scheme}`` += count (called once per batch; a count of 0 adds nothing): the
        child's own ``inc``, one call per batch."""
        self._node_identity = c.node_identity
        self._identities: set[int] = set()
        self._largest_rollback = largest_rollback
        self._multiprocess = multiprocess
        self._lock = threading.Lock()

    # -- issuing ---------------------------------------------------------------------------------------------
    def backfilled(self, count: int) -> None:
        """``idmint_backfill_ids_total{scheme}`` += count (once per backfill request)."""
        if count:
            self._backfill.inc(count)

    def generator_stats(self, rollbacks: int, max_rollback_ns: int, exhausted: int) -> None:
        """Deltas since the last call: clock rollbacks, the largest step seen (ns), sequence exhaustions."""
        if rollbacks:
            self._rollbacks.inc(rollbacks)
        if exhausted:
            self._exhausted.inc(exhausted)
        if max_rollback_ns:
            self._largest_rollback.observe(max_rollback_ns / NS_PER_SECOND)

    def issue_wait(self, seconds: float) -> None:
        """Time spent waiting for the clock (sequence exhausted, clock behind the high-water mark)."""
        self._wait.observe(seconds)

    def id_space_end(self, unix_seconds: float) -> None:
        """When the scheme's timestamp runs out (``idmint_id_space_end_timestamp_seconds``), Unix s; +Inf for never."""
        self._space_end.set(unix_seconds)

    def high_water_mark(self, unix_seconds: float) -> None:
        """The last recorded high-water mark of the scheme's identity, as Unix seconds."""
        self._hwm.set(unix_seconds)

    # -- leases ----------------------------------------------------------------------------------------------
    def lease_held(self, held: bool, identity: int | None) -> None:
        """Lease state of the scheme and this node's bounded identity for it (``idmint_node_identity_info``).

        Call once per claim: ``held=True`` with the identity claimed (several calls add several identities, e.g.
        eight-byte nodes holding several generator IDs); ``held=False`` with that identity when it is lost or
        released, or with ``None`` to drop every identity of the scheme. ``idmint_lease_held{scheme}`` is 1 while
        at least one identity is held (or, for a scheme without identities such as Wiji, after ``held=True``
        with ``None``).
        """
        with self._lock:
            identities = self._identities
            if held:
                if identity is not None and identity not in identities:
                    identities.add(identity)
                    self._node_identity.labels(scheme=self.scheme, identity=str(identity)).set(1)
                self._held.set(1)
                return
            dropped = set(identities) if identity is None else ({identity} & identities)
            for gone in dropped:
                identities.discard(gone)
                self._drop_identity(gone)
            self._held.set(1 if identities else 0)

    def _drop_identity(self, identity: int) -> None:
        if not self._multiprocess:
            try:
                self._node_identity.remove(self.scheme, str(identity))
            except KeyError:
                pass
        else:  # remove() is not supported in multiprocess mode
            self._node_identity.labels(scheme=self.scheme, identity=str(identity)).set(0)

    def identity_refused(self, reason: str) -> None:
        """An identity was refused (its high-water mark is too far ahead of our clock, or the clock stepped back).

        ``reason`` is for the caller's log line; it is not a label (it is free text, and labels must be bounded).
        """
        self._refused.inc()
