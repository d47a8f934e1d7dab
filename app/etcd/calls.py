"""One etcd call, bounded in time across every endpoint and with its errors mapped to ours."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.errors import BackendUnavailableError
from app.etcd.client import EtcdCallError, EtcdClient, map_error, redact


class Calls:
    """Bounds etcd calls on ``client``: at most ``budget`` + ``attempt_timeout`` + 0.5 seconds for one call, all
    endpoints together; ``retry_after`` (whole seconds) goes into the BackendUnavailableError of a call that took
    longer. Shared by the backend and its claims."""

    def __init__(self, client: EtcdClient, budget: float, attempt_timeout: float, retry_after: int) -> None:
        self.client = client
        self.retry_after = retry_after
        self.limit = budget + attempt_timeout + 0.5

    @asynccontextmanager
    async def bounded(self, doing: str) -> AsyncIterator[EtcdClient]:
        """Yield the client for one call made while ``doing`` (words for the error). Raises the mapped
        :class:`~app.errors.NotReadyError` (:func:`~app.etcd.client.map_error`) for an etcd error, and
        BackendUnavailableError when the call did not finish in time."""
        try:
            async with asyncio.timeout(self.limit):
                yield self.client
        except EtcdCallError as exc:
            raise map_error(exc, doing) from exc
        except TimeoutError:
            raise BackendUnavailableError(
                f"etcd at {redact(self.client.endpoint)} did not answer in time (while {doing})",
                retry_after=self.retry_after,
            ) from None
