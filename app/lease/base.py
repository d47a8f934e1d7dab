"""The lease-backend interface: how a node claims its identity per scheme, learns it was lost, and releases it.

Modelled on etcd's Go ``concurrency.Session``: a backend holds one lease per process; a :class:`Claim` is one
identity (generator ID, medallion, publisher ID, shard) bound to that lease, with a small surface:

* :attr:`Claim.deadline` -- ``time.monotonic()`` seconds after which the claim must be treated as lost (fail
  closed). ``math.inf`` for the embedded backend, whose OS file lock cannot expire.
* :attr:`Claim.lost` -- True once the lease expired, was revoked, or the claim key was deleted.
* :meth:`Claim.record_mark` -- persist a high-water mark (native timestamp units of the scheme); the mark is a
  promise: the holder issues nothing above it before recording a higher one.
* :meth:`LeaseBackend.release` -- write the final mark and give the identity back.

Two implementations: :class:`app.lease.embedded.EmbeddedBackend` (OS file locks under a state directory; one
machine) and :class:`app.lease.etcd.backend.EtcdBackend` (etcd leases; any number of replicas). Tests of code above this
interface use the embedded one; tests of the etcd one use a real etcd.
"""

from __future__ import annotations

import abc
import math
import time
from dataclasses import dataclass
from typing import Any

from app.pool import IdentityPool


@dataclass(frozen=True)
class Holder:
    """Who holds a claim: written into the claim so an operator can see it."""

    host: str
    pid: int
    version: str
    started_at: str  # RFC 3339 UTC
    address: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "started_at": self.started_at,
            "address": self.address,
        }


class Claim(abc.ABC):
    """One identity held by this node for one scheme."""

    scheme: str
    identity: int
    key: str
    """Backend key naming the identity (etcd key, or lock-file name)."""
    high_water_mark: int
    """The mark found when the identity was claimed (native units; -1 when none was recorded)."""

    @property
    def deadline(self) -> float:
        """``time.monotonic()`` after which this claim must not be used. Default: never."""
        return math.inf

    @property
    @abc.abstractmethod
    def lost(self) -> bool:
        """True once the claim can no longer be trusted (lease expired/revoked, key deleted, lock gone)."""

    def valid(self) -> bool:
        return not self.lost and time.monotonic() < self.deadline

    @abc.abstractmethod
    async def record_mark(self, mark: int) -> None:
        """Persist ``mark`` (native units) as this identity's high-water mark. Raises NotReadyError on failure."""


class LeaseBackend(abc.ABC):
    """Claims node identities. One instance per process; owned by the app's lifespan."""

    name: str
    mark_interval: float
    """Seconds between background high-water-mark refreshes."""
    mark_horizon: float
    """Seconds ahead of the clock that a recorded mark reaches; the node may issue up to it before re-recording."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect / open state. Must not raise for an unreachable backend: claims report it instead."""

    @abc.abstractmethod
    async def claim(self, pool: IdentityPool, holder: Holder, exclude: frozenset[int] = frozenset()) -> Claim:
        """Claim one free identity from ``pool``, none of ``exclude`` (refused earlier: high-water mark too far
        ahead, or already held by this node).

        Raises :class:`~app.errors.PoolExhaustedError` when every candidate is held,
        :class:`~app.errors.BackendUnavailableError` when the backend cannot be reached.
        """

    @abc.abstractmethod
    async def release(self, claim: Claim, final_mark: int | None) -> None:
        """Record ``final_mark`` (if given) and give the identity back. Never raises for a lost claim."""

    @abc.abstractmethod
    async def fleet_id(self) -> str:
        """This fleet's ID: a random UUID (text) written once in the backend (the etcd namespace, the state
        directory) by the first node that asks, and read by every later one. Raises NotReadyError when the backend
        cannot be read or written now."""

    async def count_held(self, pool: IdentityPool) -> int | None:
        """How many identities of ``pool``'s region slice are held now, by any node of this fleet (None when the
        backend cannot tell now). Raises nothing."""
        return None

    async def register(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        """Publish information that needs no exclusivity (Wiji's random part). Default: nothing."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything still held and stop background work (etcd: revoke the lease)."""

    def status(self) -> dict[str, Any]:
        """Backend state for /readyz and /v1/schemes."""
        return {"backend": self.name}
