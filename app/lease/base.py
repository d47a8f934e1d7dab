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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.schemes.base import IdentityPlan


@dataclass(frozen=True)
class PoolSpec:
    """Where a scheme's identity is claimed from (the node fills it from the scheme's identity plan).

    ``scheme``: scheme name (labels, logs, the embedded backend's folder); ``kind``: identity term
    ("generator_id", "medallion", "publisher_id", "shard"); ``candidates``: either an explicit sequence of
    identities tried in order (static assignment = one candidate) or None with ``minimum``/``maximum`` and
    ``draw`` ("scan" or "random"). ``group`` qualifies the pool (a cluster ID, a domain hash; "" otherwise).

    etcd key layout (under the namespace; the etcd backend knows no scheme, only these):
    ``key_prefix`` + ``key_format.format(identity)`` is the claim key, ``mark_prefix`` + the same segment the
    high-water-mark key; ``allowed_groups_key``, when set, names a key listing the allowed groups as a comma list
    of integers (java-uniqueid's ``cluster-id``): a pool whose ``group`` is not listed is refused.
    """

    scheme: str
    kind: str
    minimum: int
    maximum: int
    draw: str = "scan"
    candidates: Sequence[int] | None = None
    group: str = ""
    static: bool = False
    exclude: frozenset[int] = frozenset()
    """Identities not to take (refused earlier because their high-water mark was too far ahead)."""
    key_prefix: str = ""
    """etcd claim-key prefix under the namespace: ``pool/3:``, ``idmint/siq/86ce1947/``."""
    mark_prefix: str = ""
    """etcd high-water-mark key prefix under the namespace: ``idmint/marks/eight-byte/3/``."""
    key_format: str = "{:d}"
    """Identity -> last key segment (``{:011X}`` for 11 uppercase hex digits)."""
    allowed_groups_key: str | None = None
    """Key (under the namespace) listing the groups allowed to claim, as java-uniqueid's ``cluster-id``."""

    @classmethod
    def from_plan(cls, scheme: str, plan: IdentityPlan) -> PoolSpec:
        """The pool of ``plan`` for scheme ``scheme`` (a static identity becomes the only candidate)."""
        return cls(
            scheme=scheme,
            kind=plan.kind,
            minimum=plan.minimum,
            maximum=plan.maximum,
            draw=plan.draw,
            candidates=None if plan.static is None else (plan.static,),
            group=plan.group,
            static=plan.static is not None,
            key_prefix=plan.key_prefix,
            mark_prefix=plan.mark_prefix,
            key_format=plan.key_format,
            allowed_groups_key=plan.allowed_groups_key,
        )


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
    async def claim(self, pool: PoolSpec, holder: Holder) -> Claim:
        """Claim one free identity from ``pool``.

        Raises :class:`~app.errors.PoolExhaustedError` when every candidate is held,
        :class:`~app.errors.BackendUnavailableError` when the backend cannot be reached.
        """

    @abc.abstractmethod
    async def release(self, claim: Claim, final_mark: int | None) -> None:
        """Record ``final_mark`` (if given) and give the identity back. Never raises for a lost claim."""

    async def register(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        """Publish information that needs no exclusivity (Wiji's random part). Default: nothing."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything still held and stop background work (etcd: revoke the lease)."""

    def status(self) -> dict[str, Any]:
        """Backend state for /readyz and /v1/schemes."""
        return {"backend": self.name}
