"""The storage bundle: one backend's stores for this process, and what that backend can do.

:func:`app.storage.open_storage` picks the backend once, from the settings, and returns a :class:`Storage`. The code
above it (the node, the ledger, sequences, the API, the CLI) takes the stores it needs from the bundle and asks
:class:`Capabilities` what the backend can do, never for its name (:attr:`Storage.name` is for reports only: logs,
``/v1/fleet``, ``/readyz``, metric labels).

This module imports only the interfaces: :mod:`app.storage.lease`, :mod:`app.storage.ledger`,
:mod:`app.storage.sequences`, :mod:`app.storage.history`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from app.storage.backfill import BackfillStore
from app.storage.history import HistoryGuard
from app.storage.lease import LeaseBackend
from app.storage.ledger import LedgerStore
from app.storage.sequences import SequenceStore


@dataclass(frozen=True)
class Capabilities:
    """What a storage backend can do (asked instead of its name)."""

    claims_expire: bool
    """A claim lives on a lease with a TTL that the node keeps alive over the network: a node that cannot renew it
    in time stops issuing (its deadline, :attr:`~app.storage.lease.Claim.deadline`). False: an OS file lock, held
    until the process ends."""
    one_host: bool
    """Only processes on this machine share the backend (the embedded state directory): a node on another machine
    is another fleet, kept apart only by regions."""
    can_revoke: bool
    """An operator can revoke another node's claim (``POST /v1/admin/claims/{scheme}/{identity}/revoke``)."""

    def as_dict(self) -> dict[str, bool]:
        return asdict(self)


class Storage:
    """One backend's stores, opened once per process by :func:`~app.storage.open_storage` and owned by the app's
    lifespan (or the CLI command): ``leases`` (claims, high-water marks, the fleet ID, member tokens, revoke),
    ``ledger`` (the claim ledger's records), ``sequences`` (sequence records),
    ``backfill`` (backfill marks). Each store is started and stopped by
    its user; :meth:`close`, called after all of them, closes what they share (the etcd client, the PostgreSQL
    connection pool). ``name``: ``"embedded"``, ``"etcd"`` or ``"postgres"``, for reports only."""

    def __init__(
        self,
        name: str,
        capabilities: Capabilities,
        leases: LeaseBackend,
        ledger: LedgerStore,
        sequences: SequenceStore,
        closing: Callable[[], Awaitable[None]] | None = None,
        backfill: BackfillStore | None = None,
    ) -> None:
        self.name = name
        self.capabilities = capabilities
        self.leases = leases
        self.ledger = ledger
        self.sequences = sequences
        self.backfill = backfill
        """Backfill marks (:mod:`app.storage.backfill`); None for a backend that keeps none (backfill of snowflake
        and eight-byte is then refused: a memory double would repeat IDs across replicas)."""
        self.history = HistoryGuard(leases)
        """Whether the store's history is the fleet's (:mod:`app.storage.history`): checked before claims and
        sequence writes."""
        self._closing = closing

    async def close(self) -> None:
        """Close what the stores share. Never raises; call after every store's user has stopped."""
        closing, self._closing = self._closing, None
        if closing is not None:
            await closing()

    def status(self) -> dict[str, Any]:
        """``{"backend": name, "capabilities": {...}}`` plus the lease backend's own state (``/readyz``)."""
        return {
            **self.leases.status(),
            **self.history.status(),
            "backend": self.name,
            "capabilities": self.capabilities.as_dict(),
        }
