"""Stopping background tasks for good.

A cancellation can be lost on Python 3.11: ``asyncio.wait_for`` (inside this package's drivers and libraries)
returns its inner result when that completed in the same loop iteration as the cancel (CPython gh-86296, fixed in
3.12), and the cancelled task runs on as if nothing happened. A stop that cancels once and then awaits the task waits
for ever: a shutdown that never gives its leases back. :func:`cancel_and_wait` cancels again until the task ends.
"""

from __future__ import annotations

import asyncio
from typing import Any

RECANCEL_S = 2.0
"""Seconds a cancelled task is given before it is cancelled again: more than the bounded clean-up a cancelled task
may do (a database statement abandoned waits at most 1 s for its driver)."""


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel each of ``tasks`` (None and finished ones are skipped) and wait until every one has ended, cancelling
    again every :data:`RECANCEL_S` seconds those still running. Their results and errors are dropped (a task's own
    failures are its to log). Raises CancelledError when the caller is cancelled (the tasks stay cancelled)."""
    pending = {t for t in tasks if t is not None and not t.done()}
    for task in pending:
        task.cancel()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)
        for task in pending:
            task.cancel()
    for ended in tasks:
        if ended is not None and ended.done() and not ended.cancelled():
            ended.exception()  # retrieved: asyncio does not report it as never retrieved
