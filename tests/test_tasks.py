"""Background tasks stop for good: a cancellation lost on the way (Python 3.11's ``asyncio.wait_for`` returns an
inner result that completed with the cancel) is repeated until the task ends."""

from __future__ import annotations

import asyncio

import pytest

from app import tasks
from app.tasks import cancel_and_wait

pytestmark = pytest.mark.anyio


async def _swallows_one_cancel(ran_on: list[str]) -> None:
    """A task that loses its first cancellation as wait_for can (caught, not re-raised), then waits for ever."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        ran_on.append("ran on after a cancel")
    await asyncio.Event().wait()


async def test_a_task_that_lost_its_cancellation_is_cancelled_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks, "RECANCEL_S", 0.05)
    ran_on: list[str] = []
    task = asyncio.create_task(_swallows_one_cancel(ran_on))
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled() and ran_on == ["ran on after a cancel"]


async def test_none_finished_and_failed_tasks_are_passed_over_and_their_errors_retrieved() -> None:
    async def fails() -> None:
        raise ValueError("its own failure")

    failed = asyncio.create_task(fails())
    finished = asyncio.create_task(asyncio.sleep(0))
    running = asyncio.create_task(asyncio.sleep(3600))
    await asyncio.wait({failed, finished})
    await cancel_and_wait(None, failed, finished, running)
    assert running.cancelled() and finished.done() and isinstance(failed.exception(), ValueError)


async def test_the_caller_cancelled_while_waiting_is_cancelled_and_the_tasks_stay_cancelled() -> None:
    inner = asyncio.create_task(_swallows_one_cancel([]))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(cancel_and_wait(inner))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    inner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await inner
