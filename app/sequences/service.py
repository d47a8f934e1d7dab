"""The sequence service of one process: creating and showing sequences, ``next`` from the buffers, ``range``.

``next`` is served by :class:`~app.sequences.buffer.SequenceBuffer` (one per sequence this process has used).
``range`` reserves in storage directly; concurrent ``range`` requests for one sequence on one process are
coalesced: while one reservation is in flight, the next requests queue, and the queue is reserved as one range and
split in arrival order (one storage write for many requests, and no conflicts between this process's own
writes). A queued request whose client went away still gets its part reserved: it becomes a gap, never a repeat.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from app.errors import BackendUnavailableError, InvalidOptionError, SequenceOverflowError
from app.metrics import Metrics
from app.sequences.buffer import MAX_CACHE_FACTOR, PREFETCH_AT, TARGET_RANGE_S, Runs, SequenceBuffer
from app.storage.sequences import (
    CACHE_MAX,
    CACHE_MIN,
    MAX_RANGE_COUNT,
    MAX_VALUE,
    MIN_START,
    NAME_PATTERN,
    SequenceRecord,
    SequenceStore,
    check_name,
    check_settings,
)

log = logging.getLogger("idmint.sequences")


@dataclass
class _Batcher:
    """Coalesces one sequence's concurrent ``range`` requests into one storage reservation."""

    pending: list[tuple[int, asyncio.Future[tuple[int, int]]]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class SequenceService:
    """Sequences for this process. Owned by the app's lifespan (``start``/``stop``)."""

    def __init__(self, store: SequenceStore, metrics: Metrics, max_count: int) -> None:
        self.store = store
        self.metrics = metrics
        self.max_count = max_count
        self.buffers: dict[str, SequenceBuffer] = {}
        self._opening: dict[str, asyncio.Task[SequenceBuffer]] = {}
        self._batchers: dict[str, _Batcher] = {}

    async def start(self) -> None:
        await self.store.start()

    async def stop(self, hand_back: bool = True) -> None:
        """A clean stop: stop reserving, hand each buffer's unused top range back to storage (all at once, each
        within HAND_BACK_TIMEOUT_S; see :mod:`app.sequences.buffer`), count the rest as gaps, close storage."""
        for batcher in self._batchers.values():
            if batcher.task is not None:
                batcher.task.cancel()
        for task in self._opening.values():
            task.cancel()
        buffers = list(self.buffers.items())
        results = await asyncio.gather(*(b.stop(hand_back) for _, b in buffers), return_exceptions=True)
        for (name, _), result in zip(buffers, results, strict=True):
            if isinstance(result, BaseException):
                log.error("sequence %s: stopping its buffer failed: %r", name, result)
                continue
            returned, dropped = result
            if returned or dropped:
                log.info(
                    "sequence %s: %d unused integers handed back at stop, %d dropped (gap)", name, returned, dropped
                )
        await self.store.close()

    # -- sequences ----------------------------------------------------------------------------------------
    async def create(self, name: str, start: int, cache: int) -> tuple[SequenceRecord, bool]:
        """(record, created). Raises InvalidOptionError, SequenceConflictError, BackendUnavailableError."""
        check_name(name)
        check_settings(start, cache)
        return await self.store.create(name, start, cache)

    async def describe(self, name: str) -> dict[str, Any]:
        """The stored record plus this node's ranges. Raises UnknownSequenceError, BackendUnavailableError."""
        check_name(name)
        record = await self.store.get(name)
        return self._entry(record)

    async def list(self) -> list[dict[str, Any]]:
        return [self._entry(r) for r in await self.store.list()]

    def _entry(self, record: SequenceRecord) -> dict[str, Any]:
        out = record.as_dict()
        buffer = self.buffers.get(record.name)
        out["node"] = buffer.describe() if buffer is not None else {"ranges": [], "held": 0}
        return out

    def limits(self) -> dict[str, Any]:
        """What /v1/sequences describes about the rules (a /v1/schemes-like description)."""
        return {
            "name_pattern": NAME_PATTERN,
            "start": [MIN_START, MAX_VALUE],
            "cache": [CACHE_MIN, CACHE_MAX],
            "max_value": MAX_VALUE,
            "max_next_count": self.max_count,
            "max_range_count": MAX_RANGE_COUNT,
            "max_sequences": self.store.max_sequences,
            "buffer": {
                "prefetch_at_fraction_used": PREFETCH_AT,
                "target_range_seconds": TARGET_RANGE_S,
                "reservation_size": f"cache .. {MAX_CACHE_FACTOR} x cache",
            },
        }

    # -- next ---------------------------------------------------------------------------------------------
    def next_now(self, name: str, count: int) -> Runs | None:
        """The fast path: runs from a buffer already open and holding enough, else None (use :meth:`next`)."""
        buffer = self.buffers.get(name)
        return buffer.take_now(count) if buffer is not None else None

    async def next(self, name: str, count: int) -> Runs:
        """``count`` integers of ``name`` (1..max_count) from this node's buffer, in rising order.

        Raises InvalidOptionError (count, name), UnknownSequenceError, SequenceOverflowError,
        BackendUnavailableError (buffer empty and storage unreachable).
        """
        self.check_count(count, self.max_count)
        buffer = self.buffers.get(name)
        if buffer is None:
            buffer = await self._open(name)
        return await buffer.take(count)

    async def _open(self, name: str) -> SequenceBuffer:
        check_name(name)
        task = self._opening.get(name)
        if task is None:
            task = self._opening[name] = asyncio.get_running_loop().create_task(self._load_buffer(name))
            task.add_done_callback(lambda _t: self._opening.pop(name, None))
        return await asyncio.shield(task)

    async def _load_buffer(self, name: str) -> SequenceBuffer:
        record = await self.store.get(name)
        buffer = self.buffers.get(name)
        if buffer is None:
            buffer = self.buffers[name] = SequenceBuffer(name, record.cache, self.store, self.metrics.sequence(name))
        return buffer

    # -- range --------------------------------------------------------------------------------------------
    async def reserve_range(self, name: str, count: int) -> tuple[int, int]:
        """A fresh contiguous range of ``count`` (1..2**40) integers reserved in storage: (first, last).

        Raises InvalidOptionError, UnknownSequenceError, SequenceOverflowError, BackendUnavailableError.
        """
        check_name(name)
        self.check_count(count, MAX_RANGE_COUNT)
        batcher = self._batchers.get(name)
        if batcher is None:  # only sequences with a reservation in flight have one: the dict stays small
            batcher = self._batchers[name] = _Batcher()
        future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        batcher.pending.append((count, future))
        if batcher.task is None:
            batcher.task = asyncio.get_running_loop().create_task(self._drain(name, batcher))
        first, last = await future
        m = self.metrics.sequence(name)
        m.client_ranges.inc()
        m.range_ids.inc(count)
        return first, last

    async def _drain(self, name: str, batcher: _Batcher) -> None:
        batch: list[tuple[int, asyncio.Future[tuple[int, int]]]] = []
        try:
            while batcher.pending:
                batch, batcher.pending = batcher.pending, []
                total = sum(count for count, _ in batch)
                try:
                    first, _last = await self.store.reserve(name, total)
                except SequenceOverflowError as exc:
                    if len(batch) == 1:
                        _fail(batch, exc)
                    else:  # the batch as a whole does not fit: each request on its own
                        for count, future in batch:
                            try:
                                single = await self.store.reserve(name, count)
                            except Exception as single_exc:
                                _fail([(count, future)], single_exc)
                            else:
                                if not future.done():
                                    future.set_result(single)
                    continue
                except Exception as exc:
                    _fail(batch, exc)
                    continue
                for count, future in batch:
                    if not future.done():
                        future.set_result((first, first + count - 1))
                    first += count
        except asyncio.CancelledError:
            _fail(batch + batcher.pending, BackendUnavailableError("stopping: the range was not reserved"))
            batcher.pending = []
            raise
        finally:
            batcher.task = None
            if self._batchers.get(name) is batcher:
                del self._batchers[name]

    # -- input rules --------------------------------------------------------------------------------------
    @staticmethod
    def check_count(count: int, maximum: int) -> int:
        if not 1 <= count <= maximum:
            raise InvalidOptionError(f"count must be in 1..{maximum}, got {count}")
        return count


def _fail(batch: list[tuple[int, asyncio.Future[tuple[int, int]]]], exc: BaseException) -> None:
    for _count, future in batch:
        if not future.done():
            future.set_exception(exc)
