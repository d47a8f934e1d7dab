"""One bounded statement for both SQL backends (``app.storage.tables.db.answered_in_time``): a statement that does
not answer in time, or whose caller is cancelled, is ended under the driver before its connection is given up,
however often the caller is cancelled meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.errors import BackendUnavailableError
from app.storage.tables.db import answered_in_time

pytestmark = pytest.mark.anyio


class Driver:
    """A statement that hangs until abandoned; an abandon that takes a while (as the real ones wait for the driver)
    and records the order of events."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.abandoning = asyncio.Event()
        self.release = asyncio.Event()

    async def statement(self) -> str:
        try:
            await asyncio.Event().wait()
        finally:
            self.events.append("statement ended")
        return "never"

    async def abandon(self, task: asyncio.Task[Any], conn: object) -> None:
        self.abandoning.set()
        await self.release.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        self.events.append("abandoned")

    async def drop(self, conn: object) -> None:
        self.events.append("dropped")


async def test_a_caller_cancelled_again_during_the_abandon_still_ends_the_statement_before_the_drop() -> None:
    driver = Driver()
    loop = asyncio.get_running_loop()
    caller = asyncio.ensure_future(
        answered_in_time(
            driver.statement(), "conn", loop.time() + 60, abandon=driver.abandon, drop=driver.drop, late="late"
        )
    )
    await asyncio.sleep(0)
    caller.cancel()
    await driver.abandoning.wait()
    for _ in range(3):  # a stop that cancels its task again and again (app.tasks.cancel_and_wait)
        caller.cancel()
        await asyncio.sleep(0)
    assert not caller.done() and driver.events == []
    driver.release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert driver.events == ["statement ended", "abandoned", "dropped"]


async def test_a_statement_past_its_time_is_ended_then_its_connection_dropped() -> None:
    driver = Driver()
    driver.release.set()
    loop = asyncio.get_running_loop()
    with pytest.raises(BackendUnavailableError, match="did not answer"):
        await answered_in_time(
            driver.statement(),
            "conn",
            loop.time() + 0.01,
            abandon=driver.abandon,
            drop=driver.drop,
            late="did not answer",
        )
    assert driver.events == ["statement ended", "abandoned", "dropped"]


async def test_an_answer_in_time_is_the_callers_and_nothing_is_dropped() -> None:
    driver = Driver()

    async def answers() -> str:
        return "rows"

    loop = asyncio.get_running_loop()
    task = await answered_in_time(
        answers(), "conn", loop.time() + 60, abandon=driver.abandon, drop=driver.drop, late="x"
    )
    assert task.result() == "rows" and driver.events == []
