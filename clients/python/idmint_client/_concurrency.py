"""What the two clients differ in, side by side: the lock a buffer's refills are ordered by, and the runner of
background refills. ``_async_client.py`` uses the ``Async`` ones; ``_client.py``, generated from it by
``scripts/unasync.py``, the others (each name here without ``Async`` is what the generator turns the ``Async`` one
into)."""

from __future__ import annotations

import asyncio
import queue
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from idmint_client._base import Key
from idmint_client._buffer import Buffer
from idmint_client._exceptions import IdmintClientError

WORKER_IDLE_S = 5.0
"""The refill thread checks this often whether its client still exists."""


class Condition(threading.Condition):
    """The sync client's lock of one buffer (over a plain lock): held while the buffer changes, released while a
    refill is asked for and while waiting for one."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())


class AsyncCondition:
    """The async client's lock of one buffer: :class:`asyncio.Condition` with the surface of :class:`Condition` the
    client uses (``wait`` returns after at most ``timeout`` seconds, the lock held again)."""

    def __init__(self) -> None:
        self._condition = asyncio.Condition()

    async def __aenter__(self) -> None:
        await self._condition.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._condition.release()

    async def acquire(self) -> None:
        await self._condition.acquire()

    def release(self) -> None:
        self._condition.release()

    async def wait(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._condition.wait(), timeout)
        except TimeoutError:
            pass

    def notify_all(self) -> None:
        self._condition.notify_all()


class AsyncRefills:
    """Background refills of the async client: each a task of the event loop that asked for it (``refill(key,
    buffer)``); :meth:`aclose` cancels those still running."""

    def __init__(self, refill: Callable[[Key, Buffer], Coroutine[Any, Any, None]]) -> None:
        self._refill = refill
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, key: Key, buf: Buffer) -> None:
        task = asyncio.get_running_loop().create_task(self._refill(key, buf))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class Refills:
    """Background refills of the sync client: one daemon thread, started when first needed, runs ``refill(key,
    buffer)`` for each in turn. It holds the client weakly: it ends once the client is closed or collected."""

    def __init__(self, refill: Callable[[Key, Buffer], None]) -> None:
        self._refill = weakref.WeakMethod(refill)
        self._jobs: queue.SimpleQueue[tuple[Key, Buffer] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, key: Key, buf: Buffer) -> None:
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=_refill_worker, args=(self._refill, self._jobs), name="idmint-client-refill", daemon=True
                    )
                    self._thread.start()
        self._jobs.put((key, buf))

    def close(self) -> None:
        self._jobs.put(None)


def _refill_worker(
    ref: weakref.WeakMethod[Callable[[Key, Buffer], None]], jobs: queue.SimpleQueue[tuple[Key, Buffer] | None]
) -> None:
    """The refill thread: runs the client's refills one at a time, until the client is closed or gone."""
    while True:
        try:
            job = jobs.get(timeout=WORKER_IDLE_S)
        except queue.Empty:
            if ref() is None:
                return
            continue
        refill = ref()
        if job is None or refill is None:
            return
        try:
            refill(*job)
        except IdmintClientError:
            pass
        del refill
