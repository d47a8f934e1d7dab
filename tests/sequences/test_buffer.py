"""The in-memory double buffer (Leaf segment mode) over the storage test double: when it reserves, how much,
what it serves while storage is down, and the rules it never breaks (rising, never twice, overflow named)."""

from __future__ import annotations

import asyncio

import pytest

from app import __version__
from app.errors import BackendUnavailableError, SequenceOverflowError
from app.metrics import Metrics
from app.sequences.buffer import MAX_CACHE_FACTOR, TARGET_RANGE_S, SequenceBuffer, next_reservation_size
from app.storage.sequences import MAX_VALUE, MemorySequenceStore
from tests.helpers import FakeClock

pytestmark = pytest.mark.anyio


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def make(cache: int = 100, start: int = 1) -> tuple[MemorySequenceStore, SequenceBuffer, FakeClock, Metrics]:
    store = MemorySequenceStore()
    await store.create("orders", start, cache)
    metrics = Metrics([], __version__)
    clock = FakeClock.from_s(1000)  # monotonic seconds: clock.seconds
    return store, SequenceBuffer("orders", cache, store, metrics.sequence("orders"), clock.seconds), clock, metrics


def flat(runs: list[tuple[int, int, int]]) -> list[int]:
    return [first + i * step for first, count, step in runs for i in range(count)]


def test_reservation_size_rule() -> None:
    cache = 1000
    assert next_reservation_size(cache, cache, 0, 10.0) == cache  # idle: the floor
    assert next_reservation_size(cache, cache, 1000, 1.0) == cache * MAX_CACHE_FACTOR  # 1000/s * 900 s, capped
    assert next_reservation_size(cache, cache, 10, 1.0) == 9000  # 10/s lasts 900 s
    assert next_reservation_size(cache, 80_000, 10, 1.0) == 40_000  # shrinks by half at most
    assert next_reservation_size(cache, 2000, 1, 3600.0) == cache  # never below cache
    assert next_reservation_size(cache, cache, 5, 0.0) == cache * MAX_CACHE_FACTOR
    assert TARGET_RANGE_S == 900.0


async def test_first_range_then_next_reserved_in_background_at_ten_percent() -> None:
    store, buf, clock, _ = await make(cache=100)
    assert flat(await buf.take(1)) == [1]
    await settle()
    assert [(s.first, s.last) for s in buf.segments] == [(1, 100)]
    assert store.reservations == 1
    assert flat(await buf.take(8)) == list(range(2, 10))  # 9 of 100 used: below 10 %
    await settle()
    assert store.reservations == 1
    clock.advance_s(1.0)
    assert flat(await buf.take(1)) == [10]  # 10 % used: the next range is reserved
    await settle()
    assert store.reservations == 2
    assert len(buf.segments) == 2
    # 10 integers in 1 s: the next range aims at 900 s -> 9,000, within cache..100 x cache.
    assert buf.segments[1].last - buf.segments[1].first + 1 == 9000
    # Only two ranges are ever held: no third reservation while the second waits.
    assert flat(await buf.take(50)) == list(range(11, 61))
    await settle()
    assert store.reservations == 2


async def test_requests_cross_ranges_in_rising_order_and_never_repeat() -> None:
    store, buf, clock, _ = await make(cache=7)
    seen: list[int] = []
    for count in (1, 3, 5, 7, 2, 11, 30, 1, 64):
        clock.advance_s(0.5)
        seen += flat(await buf.take(count))
        await settle()
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert max(seen) < store.records["orders"].next


async def test_concurrent_takers_get_distinct_rising_integers() -> None:
    _, buf, _, _ = await make(cache=5)
    got = await asyncio.gather(*(buf.take(n) for n in [3, 9, 1, 20, 4, 4, 50] * 5))
    values = [v for runs in got for v in flat(runs)]
    assert len(set(values)) == len(values)
    for runs in got:
        assert flat(runs) == sorted(flat(runs))


async def test_storage_down_serves_held_ranges_then_503_then_resumes() -> None:
    store, buf, clock, metrics = await make(cache=100)
    await buf.take(20)
    await settle()  # second range reserved (1..100, then more)
    held = buf.held
    store.unavailable = "etcd is unreachable"
    served = 0
    while True:
        try:
            served += len(flat(await buf.take(7)))
        except BackendUnavailableError as exc:
            assert "ran out" in exc.reason and "etcd is unreachable" in exc.reason
            assert exc.retry_after >= 1
            break
        await settle()
    assert served == held - held % 7  # every held integer that could be asked for was served
    name = {"sequence": "orders"}
    assert metrics.registry.get_sample_value("idmint_sequence_unavailable_total", name) == 1
    assert (metrics.registry.get_sample_value("idmint_sequence_storage_failures_total", name) or 0) >= 1
    store.unavailable = None
    clock.advance_s(10)
    after = flat(await buf.take(3))
    assert after[0] > buf.segments[0].first - 1 and after == sorted(after)


async def test_big_request_reserves_what_it_lacks_at_once() -> None:
    store, buf, _, _ = await make(cache=10)
    runs = await buf.take(5000)
    assert flat(runs) == list(range(1, 5001))
    assert store.reservations <= 3


async def test_overflow_serves_up_to_the_maximum_then_names_the_rule() -> None:
    _, buf, _, _ = await make(cache=10, start=MAX_VALUE - 24)
    got: list[int] = []
    for _ in range(2):
        got += flat(await buf.take(10))
        await settle()
    with pytest.raises(SequenceOverflowError, match=r"2\*\*63-1"):
        await buf.take(10)  # 5 are left: not enough
    got += flat(await buf.take(5))
    assert got == list(range(MAX_VALUE - 24, MAX_VALUE + 1))
    with pytest.raises(SequenceOverflowError, match="maximum value"):
        await buf.take(1)


def samples(metrics: Metrics) -> tuple[float | None, float | None]:
    name = {"sequence": "orders"}
    registry = metrics.registry
    return (
        registry.get_sample_value("idmint_sequence_gap_total", name),
        registry.get_sample_value("idmint_sequence_buffered", name),
    )


async def test_a_clean_stop_hands_the_unused_range_back() -> None:
    store, buf, _, metrics = await make(cache=100)
    assert flat(await buf.take(5)) == [1, 2, 3, 4, 5]
    assert await buf.stop() == (95, 0)
    assert store.records["orders"].next == 6  # the next node's first integer follows the last one issued
    assert samples(metrics) == (0, 0)
    with pytest.raises(BackendUnavailableError, match="stopping"):
        await buf.take(1)  # nothing is issued (nor reserved) after the stop
    assert store.records["orders"].next == 6 and store.reservations == 1
    assert await buf.stop() == (0, 0)  # a second stop hands nothing back twice


async def test_two_contiguous_ranges_go_back_as_one() -> None:
    store, buf, clock, metrics = await make(cache=100)
    await buf.take(10)
    clock.advance_s(1.0)
    await buf.take(1)
    await settle()
    assert len(buf.segments) == 2 and buf.segments[1].first == 101  # prefetched, right after the first
    held = buf.held
    assert held == 89 + 9900  # 11 integers in 1 s: the second range aims at 900 s
    assert await buf.stop() == (held, 0)
    assert store.records["orders"].next == 12
    assert samples(metrics) == (0, 0)


async def test_only_the_top_run_goes_back_when_another_reservation_came_between() -> None:
    store, buf, clock, metrics = await make(cache=100)
    await buf.take(10)
    other = await store.reserve("orders", 50)  # a client's range (or another node) between the two buffer ranges
    assert other == (101, 50, 1)
    clock.advance_s(1.0)
    await buf.take(1)
    await settle()
    assert [s.first for s in buf.segments] == [1, 151]
    top = buf.segments[1].last - 151 + 1
    assert await buf.stop() == (top, 89)  # 12..100 lie below the other range: a gap
    assert store.records["orders"].next == 151
    assert samples(metrics) == (89, 0)


@pytest.mark.parametrize("since", ["reserved", "range"])
async def test_a_reservation_since_keeps_the_range_a_gap(since: str) -> None:
    store, buf, _, metrics = await make(cache=100)
    await buf.take(5)  # 5 %: no prefetch
    if since == "reserved":  # another node (its own store object) reserved since: the record moved on
        store.put(store.records["orders"].advance(7)[2])
    else:  # this process reserved a client's range since: its latest write is not the buffer's
        await store.reserve("orders", 7)
    assert await buf.stop() == (0, 95)
    assert store.records["orders"].next == 108  # nothing went back
    assert samples(metrics) == (95, 0)


async def test_storage_down_or_slow_at_stop_is_a_gap_within_the_timeout() -> None:
    store, buf, _, metrics = await make(cache=100)
    await buf.take(5)  # 5 %: no prefetch
    store.unavailable = "etcd is unreachable"
    assert await buf.stop() == (0, 95)
    assert samples(metrics) == (95, 0)

    store, buf, _, metrics = await make(cache=100)
    await buf.take(5)  # 5 %: no prefetch
    release = asyncio.Event()

    async def hangs(name: str, first: int, last: int, timeout: float, **where: object) -> bool:
        await release.wait()
        return True

    store.give_back = hangs  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await buf.stop(timeout=0.05) == (0, 95)
    assert loop.time() - started < 5.0  # the store never answers: returning at all is the bound
    assert samples(metrics) == (95, 0)
    assert store.records["orders"].next == 101


async def test_a_prefetch_in_flight_at_stop_lands_and_goes_back_with_the_rest() -> None:
    store, buf, _, metrics = await make(cache=100)
    await buf.take(30)  # 30 %: the next range is being reserved (no settle: in flight when the stop begins)
    assert buf._load_task is not None
    returned, dropped = await buf.stop()
    assert (returned, dropped) == (70 + 10_000, 0)
    assert store.records["orders"].next == 31
    assert samples(metrics) == (0, 0)


async def test_stop_without_hand_back_counts_the_unused_integers_as_a_gap() -> None:
    store, buf, _, metrics = await make(cache=100)
    await buf.take(30)
    await settle()
    held = buf.held
    assert await buf.stop(hand_back=False) == (0, held)
    assert samples(metrics) == (held, 0)
    assert store.records["orders"].next == 101 + held - 70
