"""The new_id buffer against a live server: refilled before it runs dry, max_age, adaptive sizes, threads, fork."""

from __future__ import annotations

import asyncio
import operator
import os
import threading
import time

import pytest
from idmint_client import AsyncClient, Client
from idmint_client._buffer import Buffer

from tests.support.server import Server

pytestmark = pytest.mark.anyio


def wiji_time_us(client: Client, text: str) -> int:
    return int(client.decode(text, scheme="wiji").fields["timestamp_us"])


def test_buffer_asks_for_each_refill_in_the_background_before_it_runs_dry(server: Server) -> None:
    """Steady use: after the first batch, every refill is asked for by the buffer itself while at least one burst
    of IDs remains, so a draw never has to fetch for itself. Whether a refill also *arrives* before the last ID is
    drawn depends on the machine's load, so that is a benchmark figure (bench/bench_client.py prints the misses),
    not asserted here; a draw that finds the buffer empty waits for the refill already on its way."""
    with Client(server.url, min_refill=200) as client:
        consumer = threading.get_ident()
        left_when_asked: list[int] = []
        consumer_fetches = 0
        schedule, fetch = client._schedule, client._fetch

        def recording_schedule(key: object, buf: Buffer) -> None:
            current = operator.length_hint(buf.current.iterator) if buf.current is not None else 0
            left_when_asked.append(buf.queued + current)
            schedule(key, buf)

        def recording_fetch(lock: object, buf: Buffer) -> tuple[list[str], float, float]:
            nonlocal consumer_fetches
            consumer_fetches += threading.get_ident() == consumer
            return fetch(lock, buf)

        def steady_use(bursts: int) -> None:  # bursts of 100 IDs, ~20 ms apart (~5000 IDs/s on a quiet machine)
            for _ in range(bursts):
                for _ in range(100):
                    client.new_id("wiji")
                time.sleep(0.02)

        steady_use(25)  # the first draw fetches the first batch itself; the rate is learned
        (warm,) = client.stats()
        client._schedule = recording_schedule  # type: ignore[method-assign]
        client._fetch = recording_fetch  # type: ignore[method-assign]
        steady_use(100)
        (stats,) = client.stats()
        assert stats.refills >= warm.refills + 2 and len(left_when_asked) >= 2, (warm, stats)  # refilled meanwhile
        assert consumer_fetches == 0, (warm, stats)  # ...always in the background, never by a draw itself
        assert min(left_when_asked) >= 100, (left_when_asked, stats)  # ...asked while a burst or more remained
        assert stats.expired == 0, stats


def test_max_age_discards_stale_ids(server: Server) -> None:
    with Client(server.url, max_age=0.2) as client:
        client.new_id("wiji")
        time.sleep(0.35)
        before = time.time()
        fresh = client.new_id("wiji")
        (stats,) = client.stats()
        assert stats.expired >= 1 and stats.refills == 2, stats
        # the ID handed out after the pause was issued after it, not taken from the stale batch
        assert wiji_time_us(client, fresh) >= int((before - 0.05) * 1e6)
    with Client(server.url, max_age=None) as client:
        old = client.new_id("wiji")
        time.sleep(0.3)
        assert client.new_id("wiji") > old and client.stats()[0].refills == 1


def test_refill_size_adapts_to_the_rate_of_use_within_its_bounds(server: Server) -> None:
    with Client(server.url, min_refill=50, max_refill=20_000) as client:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # as fast as one thread can draw
            client.new_id("wiji")
        fast = client.stats()[0]
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # ~50 IDs/s
            client.new_id("hlc-ulid")
            time.sleep(0.02)
        slow = next(s for s in client.stats() if s.scheme == "hlc-ulid")
        assert fast.refill_size == 20_000, fast  # capped by max_refill
        assert slow.refill_size == 50, slow  # floored at min_refill
        assert fast.issued > 100 * slow.issued


def test_eight_threads_never_get_the_same_id(server: Server) -> None:
    per_thread = 50_000
    results: list[list[str]] = [[] for _ in range(8)]
    with Client(server.url, min_refill=100) as client:

        def draw(out: list[str]) -> None:
            for _ in range(per_thread):
                out.append(client.new_id("hlc-ulid"))

        threads = [threading.Thread(target=draw, args=(r,)) for r in results]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    everything = [i for r in results for i in r]
    assert len(everything) == 8 * per_thread and len(set(everything)) == len(everything)
    for r in results:  # each thread sees increasing IDs (buffers hand them out in issue order)
        assert r == sorted(r)


def test_forked_child_starts_with_an_empty_buffer(server: Server) -> None:
    with Client(server.url, max_age=None) as client:
        parent_first = [client.new_id("hlc-ulid") for _ in range(10)]  # warm buffer in the parent
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: draw from the same Client object, send the IDs back, exit without cleanup
            code = 1
            try:
                os.close(read_fd)
                got = [client.new_id("hlc-ulid") for _ in range(2000)]
                stats = client.stats()
                line = f"{stats[0].refills}|" + ",".join(got)
                with os.fdopen(write_fd, "w") as pipe:
                    pipe.write(line)
                code = 0
            finally:
                os._exit(code)
        os.close(write_fd)
        parent = [client.new_id("hlc-ulid") for _ in range(2000)]
        with os.fdopen(read_fd) as pipe:
            refills, _, child_text = pipe.read().partition("|")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        child = child_text.split(",")
        assert len(child) == 2000
        assert int(refills) >= 1  # the child fetched its own batches
        everything = parent_first + parent + child
        assert len(set(everything)) == len(everything), "a buffered ID was handed out by two processes"


async def test_async_tasks_share_one_buffer_without_duplicates(server: Server) -> None:
    async with AsyncClient(server.url, max_age=0.3, min_refill=100) as client:

        async def worker() -> list[str]:
            out = []
            for i in range(5000):
                out.append(await client.new_id("wiji"))
                if i % 1000 == 0:
                    await asyncio.sleep(0.01)
            return out

        results = await asyncio.gather(*(worker() for _ in range(8)))
        everything = [i for r in results for i in r]
        assert len(set(everything)) == 40_000
        await asyncio.sleep(0.4)
        await client.new_id("wiji")
        (stats,) = client.stats()
        assert stats.expired > 0 and stats.refills >= 3, stats
