"""The metrics counted on every request, kept as plain numbers in a single process: ``idmint_requests_total`` and
``idmint_request_duration_seconds`` (:class:`RequestTally`), ``idmint_ids_issued_total``,
``idmint_api_key_requests_total`` and ``idmint_api_key_ids_total`` (:class:`CountTally`).

Every HTTP request is counted once, and every batch issued once, so these are the metrics on the hot path's every
call. A
prometheus-client ``Counter.inc`` plus ``Histogram.observe`` each take a lock and walk the buckets in Python
(figures: docs/serving.md, "Figures behind choices in the code"); :meth:`RequestTally.observe` is one dict lookup,
one bisection and three additions (all on the event loop's thread), and :meth:`RequestTally.collect` builds the
same two families at scrape time with prometheus-client's ``CounterMetricFamily`` and ``HistogramMetricFamily``
(:meth:`Count.inc` is one addition). In multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``) custom collectors are not read, so :class:`~app.metrics.Metrics` keeps
prometheus-client's own objects there.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any


class RequestTally:
    """A prometheus-client collector (``registry.register(tally)``) of requests by (route, method, status) and of
    their durations by (route, method), in seconds, into ``buckets`` (upper bounds, ascending; ``+Inf`` added)."""

    def __init__(self, buckets: tuple[float, ...], counter: tuple[str, str], histogram: tuple[str, str]) -> None:
        self.bounds = list(buckets)
        self.counter_name, self.counter_help = counter
        self.histogram_name, self.histogram_help = histogram
        self._by_status: dict[tuple[str, str, int], list[Any]] = {}
        """(route, method, status) -> [requests, the (route, method) duration record]."""
        self._durations: dict[tuple[str, str], list[Any]] = {}
        """(route, method) -> [counts per bucket (not cumulative; the last is +Inf), sum of seconds]."""

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        """One finished request (``route`` a bounded template, ``method`` a bounded name)."""
        record = self._by_status.get((route, method, status))
        if record is None:
            record = self._add(route, method, status)
        record[0] += 1
        duration = record[1]
        duration[0][bisect_left(self.bounds, seconds)] += 1
        duration[1] += seconds

    def _add(self, route: str, method: str, status: int) -> list[Any]:
        duration = self._durations.get((route, method))
        if duration is None:
            duration = self._durations[(route, method)] = [[0] * (len(self.bounds) + 1), 0.0]
        record = self._by_status[(route, method, status)] = [0, duration]
        return record

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        requests = CounterMetricFamily(self.counter_name, self.counter_help, labels=["route", "method", "status"])
        for (route, method, status), record in list(self._by_status.items()):
            requests.add_metric([route, method, str(status)], record[0])
        yield requests
        durations = HistogramMetricFamily(self.histogram_name, self.histogram_help, labels=["route", "method"])
        for (route, method), (counts, total) in list(self._durations.items()):
            cumulative, buckets = 0, []
            for bound, count in zip([*self.bounds, float("inf")], list(counts)):
                cumulative += count
                buckets.append((_le(bound), cumulative))
            durations.add_metric([route, method], buckets, total)
        yield durations

    def describe(self) -> Iterator[Any]:
        return iter(())


class Count:
    """One counter's value (a :class:`CountTally` child): :meth:`inc` is one addition, no lock (every caller runs
    on the event loop's thread)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class CountTally:
    """A prometheus-client collector of one counter family with ``labels``: ``child(*label_values)`` hands out its
    :class:`Count` children (one per combination of values), :meth:`collect` reports them."""

    def __init__(self, name: str, documentation: str, *labels: str) -> None:
        self.name, self.documentation, self.labels = name, documentation, list(labels)
        self._children: dict[tuple[str, ...], Count] = {}

    def child(self, *values: str) -> Count:
        return self._children.setdefault(values, Count())

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for values, count in list(self._children.items()):
            family.add_metric(list(values), count.value)
        yield family

    def describe(self) -> Iterator[Any]:
        return iter(())


def _le(bound: float) -> str:
    """A bucket's ``le`` label as prometheus-client writes it for these buckets (``0.0001``, ``1.0``, ``+Inf``)."""
    return "+Inf" if bound == float("inf") else repr(bound)
