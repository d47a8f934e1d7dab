"""The process's one etcd client (:func:`open_client`), and one call on it bounded in time across every endpoint,
its errors mapped to ours (:class:`Calls`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from app.errors import BackendUnavailableError, ConfigError
from app.storage.etcd.client import EtcdCallError, EtcdClient, map_error, redact, ssl_context

if TYPE_CHECKING:
    from app.settings import Settings


RETRY_BUDGET_S = 0.5
"""Seconds one call of the stores (sequences, ledger, revoke) keeps retrying the endpoints (each is tried once
anyway). Short: a node's buffer rides out etcd trouble and retries in the background with backoff, so a request
should learn of an outage quickly."""


def open_client(settings: Settings) -> EtcdClient:
    """The one etcd client of this process for ``settings.etcd_*`` (endpoints, TLS, auth); every user takes a view
    of it with its own time limits (:meth:`EtcdClient.limited`). Its defaults: ``etcd_request_timeout`` per
    endpoint, every endpoint once. Raises ConfigError for TLS files without https:// endpoints, or unreadable ones.
    """
    if not settings.etcd_endpoints:
        raise ConfigError("etcd storage needs etcd_endpoints (IDMINT_ETCD_ENDPOINTS), got none")
    tls_wanted = any(url.startswith("https://") for url in settings.etcd_endpoints)
    if not tls_wanted and any(
        f is not None for f in (settings.etcd_ca_cert, settings.etcd_cert_cert, settings.etcd_cert_key)
    ):
        raise ConfigError("etcd_ca_cert / etcd_cert_cert / etcd_cert_key need https:// etcd_endpoints")
    tls = ssl_context(settings.etcd_ca_cert, settings.etcd_cert_cert, settings.etcd_cert_key) if tls_wanted else None
    return EtcdClient(
        settings.etcd_endpoints,
        timeout=settings.etcd_request_timeout,
        budget=settings.etcd_request_timeout,
        connect_timeout=settings.etcd_connect_timeout,
        tls=tls,
        user=settings.etcd_user,
        password=settings.etcd_password,
    )


class Calls:
    """Bounds etcd calls on ``client``: at most ``budget`` + ``attempt_timeout`` + 0.5 seconds for one call, all
    endpoints together; ``retry_after`` (whole seconds) goes into the BackendUnavailableError of a call that took
    longer. Shared by the backend and its claims."""

    def __init__(self, client: EtcdClient, budget: float, attempt_timeout: float, retry_after: int) -> None:
        self.client = client
        self.retry_after = retry_after
        self.limit = budget + attempt_timeout + 0.5

    @classmethod
    def on(
        cls, client: EtcdClient, settings: Settings, attempt_timeout: float, retry_after: int, lane: str | None = None
    ) -> Calls:
        """Calls on a view of ``client`` (on the connections of ``lane``, default the client's) in which one endpoint
        gets ``attempt_timeout`` seconds and one call every endpoint once and at least ``etcd_request_timeout``
        seconds."""
        budget = max(settings.etcd_request_timeout, attempt_timeout * len(client.endpoints))
        view = client.limited(timeout=attempt_timeout, budget=budget, lane=lane)
        return cls(view, budget, attempt_timeout, retry_after)

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
