"""One etcd call, bounded in time across every endpoint and with its errors mapped to ours."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from app.errors import BackendUnavailableError, ConfigError
from app.storage.etcd.client import EtcdCallError, EtcdClient, map_error, redact, ssl_context

if TYPE_CHECKING:
    from app.settings import Settings


class Calls:
    """Bounds etcd calls on ``client``: at most ``budget`` + ``attempt_timeout`` + 0.5 seconds for one call, all
    endpoints together; ``retry_after`` (whole seconds) goes into the BackendUnavailableError of a call that took
    longer. Shared by the backend and its claims."""

    def __init__(self, client: EtcdClient, budget: float, attempt_timeout: float, retry_after: int) -> None:
        self.client = client
        self.retry_after = retry_after
        self.limit = budget + attempt_timeout + 0.5

    @classmethod
    def connect(cls, settings: Settings, attempt_timeout: float, retry_after: int) -> Calls:
        """Calls on a new client for ``settings.etcd_*`` (endpoints, TLS, auth): one endpoint gets
        ``attempt_timeout`` seconds, one call every endpoint once and at least ``etcd_request_timeout`` seconds.
        Raises ConfigError for TLS files without https:// endpoints, or unreadable ones."""
        tls_wanted = any(url.startswith("https://") for url in settings.etcd_endpoints)
        if not tls_wanted and any(
            f is not None for f in (settings.etcd_ca_cert, settings.etcd_cert_cert, settings.etcd_cert_key)
        ):
            raise ConfigError("etcd_ca_cert / etcd_cert_cert / etcd_cert_key need https:// etcd_endpoints")
        tls = (
            ssl_context(settings.etcd_ca_cert, settings.etcd_cert_cert, settings.etcd_cert_key) if tls_wanted else None
        )
        budget = max(settings.etcd_request_timeout, attempt_timeout * len(settings.etcd_endpoints))
        client = EtcdClient(
            settings.etcd_endpoints,
            timeout=attempt_timeout,
            budget=budget,
            connect_timeout=settings.etcd_connect_timeout,
            tls=tls,
            user=settings.etcd_user,
            password=settings.etcd_password,
        )
        return cls(client, budget, attempt_timeout, retry_after)

    @asynccontextmanager
    async def bounded(self, doing: str) -> AsyncIterator[EtcdClient]:
        """Yield the client for one call made while ``doing`` (words for the error). Raises the mapped
        :class:`~app.errors.NotReadyError` (:func:`~app.storage.etcd.client.map_error`) for an etcd error, and
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
