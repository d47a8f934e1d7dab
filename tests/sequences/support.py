"""Load and checks shared by the sequence replica tests (embedded and etcd): concurrent clients calling ``next``
and ``range`` on real ``idmint serve`` processes, and the assertions every scenario makes afterwards."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

SEQUENCES = ("orders", "invoices")


@dataclass
class Served:
    """Everything handed out, per sequence: next integers (per client call, in order) and ranges."""

    calls: dict[str, list[tuple[str, int, list[int]]]] = field(default_factory=lambda: defaultdict(list))
    times: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """Monotonic time at which each of ``calls`` was answered."""
    ranges: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    refused: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_next(self, url: str, client: int, name: str, ids: list[int]) -> None:
        with self.lock:
            self.calls[name].append((url, client, ids))
            self.times[name].append(time.monotonic())

    def add_range(self, name: str, first: int, last: int) -> None:
        with self.lock:
            self.ranges[name].append((first, last))

    def served_between(self, start: float, end: float) -> int:
        """Integers answered by next calls between two monotonic times (all sequences)."""
        return sum(
            len(ids)
            for name in self.calls
            for (_, _, ids), t in zip(self.calls[name], self.times[name], strict=True)
            if start <= t <= end
        )

    def integers(self, name: str) -> int:
        return sum(len(ids) for _, _, ids in self.calls[name]) + sum(b - a + 1 for a, b in self.ranges[name])


def served_by(served: Served, url: str) -> int:
    """Integers ``url`` has answered to next calls so far."""
    with served.lock:
        return sum(len(ids) for name in SEQUENCES for u, _, ids in served.calls[name] if u == url)


def wait_served(served: Served, url: str, more: int) -> None:
    """Wait until ``url`` answered ``more`` integers more to next calls (a condition, not a time)."""
    target, deadline = served_by(served, url) + more, time.monotonic() + 60
    while served_by(served, url) < target:
        assert time.monotonic() < deadline, f"{url} served fewer than {more} integers in 60 s"
        time.sleep(0.02)


def each_served(served: Served, urls: list[str], more: int) -> Callable[[], None]:
    """A ``during`` for :func:`run_clients`: returns once every one of ``urls`` answered ``more`` integers more to
    next calls than when it was called (load measured in work done, not in seconds)."""

    def wait() -> None:
        for url in urls:
            wait_served(served, url, more)

    return wait


def create(url: str, cache: int) -> None:
    for name in SEQUENCES:
        r = httpx.post(f"{url}/v1/sequences", json={"name": name, "cache": cache}, timeout=30)
        assert r.status_code in (200, 201), r.text


def client_loop(
    url: str,
    client: int,
    served: Served,
    stop: threading.Event,
    max_range: int = 1000,
    max_next: int = 50,
    tolerate: tuple[int, ...] = (),
    pause: float = 0.0,
) -> None:
    """Alternate next and range calls for both sequences until ``stop``; record what was served.

    Status codes in ``tolerate`` (e.g. 503 during an outage, or connection errors when 0 is listed) are counted
    in ``served.refused``; anything else fails the test.
    """
    rng = random.Random(client)
    with httpx.Client(base_url=url, timeout=30) as http:
        while not stop.is_set():
            name = rng.choice(SEQUENCES)
            try:
                if rng.random() < 0.7:
                    count = rng.randint(1, max_next)
                    r = http.get(f"/v1/sequences/{name}/next", params={"count": count})
                    if r.status_code == 200:
                        ids = r.json()["ids"]
                        assert len(ids) == count
                        served.add_next(url, client, name, ids)
                        continue
                else:
                    count = rng.randint(1, max_range)
                    r = http.post(f"/v1/sequences/{name}/range", params={"count": count})
                    if r.status_code == 200:
                        body = r.json()
                        assert body["last"] - body["first"] + 1 == count, body  # contiguous, as asked
                        served.add_range(name, body["first"], body["last"])
                        continue
            except httpx.TransportError:
                if 0 not in tolerate:
                    raise
                served.refused += 1
                time.sleep(0.05)
                continue
            assert r.status_code in tolerate, (r.status_code, r.text)
            if r.status_code == 503:
                assert int(r.headers["retry-after"]) >= 1
            served.refused += 1
            time.sleep(0.02)
            if pause:
                time.sleep(pause)


def run_clients(
    urls: list[str], per_replica: int, seconds: float, served: Served, during: object = None, **kwargs: object
) -> None:
    """``per_replica`` client threads per URL for ``seconds`` (or until ``during()``, called in this thread while
    they run, returns); the first client error is raised here."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def target(url: str, client: int) -> None:
        try:
            client_loop(url, client, served, stop, **kwargs)
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [
        threading.Thread(target=target, args=(url, i * 100 + j))
        for i, url in enumerate(urls)
        for j in range(per_replica)
    ]
    for t in threads:
        t.start()
    try:
        if callable(during):
            during()
        else:
            stop.wait(seconds)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    if errors:
        raise errors[0]


def allocation_point(url: str, name: str) -> int:
    r = httpx.get(f"{url}/v1/sequences/{name}", timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["next"])


def check(served: Served, url: str) -> None:
    """Every integer distinct (next and range, across replicas), each client's next calls rising per replica,
    nothing at or above the stored allocation point."""
    for name in SEQUENCES:
        spans = [(i, i) for _, _, ids in served.calls[name] for i in ids] + served.ranges[name]
        assert spans, f"{name}: nothing was served"
        spans.sort()
        for a, b in itertools.pairwise(spans):
            assert a[1] < b[0], f"{name}: {a} and {b} overlap: an integer was issued twice"
        top = allocation_point(url, name)
        assert spans[-1][1] < top, f"{name}: {spans[-1]} is not below the stored allocation point {top}"
        last: dict[tuple[str, int], int] = {}
        for replica, client, ids in served.calls[name]:
            assert ids == sorted(ids)
            key = (replica, client)
            if key in last:
                assert ids[0] > last[key], f"{name}: replica {replica} went backwards for client {client}"
            last[key] = ids[-1]
