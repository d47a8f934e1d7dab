"""The lease-backend interface: how a node claims an identity per scheme, is told it was lost, and releases it.

Words, one meaning each (the rest of idmint uses them so)::

    identity      the number a scheme leases so that no two processes issue from the same one at the same time:
                  an eight-byte generator ID, a snowflake worker ID, a Muid medallion, an HLC-ULID publisher ID,
                  a SIQ shard (:class:`~app.schemes.pool.IdentityPool` says which numbers, and the kind's name)
    lease         the backend's time-limited grant behind every claim of a process (etcd: one lease, kept alive
                  every TTL/3 by :class:`~app.storage.etcd.session.Session`; embedded: the process's file locks)
    claim         one identity held on the lease (:class:`Claim`): its key, its high-water mark, its deadline
    owner         who holds a claim, written into it for operators: host, pid, version, start time, address
                  (:class:`Owner`)
    holder        the one object per scheme that claims identities and answers "may this scheme issue now, and
                  with which generator?" (:class:`app.issuing.holder.IdentityHolder`)
    high-water    the timestamp (the scheme's native units) at or above every ID issued on an identity, recorded
    mark          before those IDs leave the process (:meth:`Claim.record_mark`)

    LeaseBackend  -- claims identities for a process (one per process)
     +-- EmbeddedBackend  (app.storage.embedded.lease: flock-ed files under a state directory; one machine)
     +-- EtcdBackend      (app.storage.etcd.backend: etcd leases; any number of replicas)
    Claim         -- one identity held; lost is pushed to :meth:`Claim.on_lost` callbacks
     +-- EmbeddedClaim    (an OS file lock: never lost behind our back, deadline never)
     +-- EtcdClaim        (app.storage.etcd.claim: a key on the lease, watched; lost with the lease or the key)

Modelled on etcd's Go ``concurrency.Session``. A claim's surface:

* :attr:`Claim.deadline` -- seconds on :attr:`Claim.clock` (the backend's monotonic clock, injected: the same one
  every comparison uses) after which the claim must be treated as lost (fail closed). ``math.inf`` for the
  embedded backend, whose OS file lock cannot expire.
* :attr:`Claim.lost` -- True once the lease expired, was revoked, or the claim key was deleted; the moment it
  happens every :meth:`Claim.on_lost` callback is called (a pushed event, as etcd's ``Session.Done()``).
* :meth:`Claim.record_mark` -- persist a high-water mark (native timestamp units of the scheme); the mark is a
  promise: the holder issues nothing above it before recording a higher one.
* :meth:`LeaseBackend.release` -- write the final mark and give the identity back.

Tests of code above this interface use the embedded backend; tests of the etcd one use a real etcd.
"""

from __future__ import annotations

import abc
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.errors import BackendUnavailableError, RevokeRefusedError
from app.schemes.pool import IdentityPool


@dataclass(frozen=True)
class Facts:
    """What a backend's store is now: ``identity`` (name -> value; equal for as long as the store keeps its
    history), ``position`` (a number that only grows with it; None: the backend has none), and the words naming
    the position for messages (``"WAL position"``, ``"revision"``)."""

    identity: dict[str, Any]
    position: int | None = None
    position_name: str = "position"


@dataclass(frozen=True)
class Owner:
    """Who holds a claim (this process): written into the claim so an operator can see it."""

    host: str
    pid: int
    version: str
    started_at: str  # RFC 3339 UTC
    address: str = ""
    pod: str = ""
    """The Kubernetes pod name (downward API ``POD_NAME``), empty outside Kubernetes."""
    namespace: str = ""
    """The Kubernetes namespace (downward API ``POD_NAMESPACE``), empty outside Kubernetes."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "started_at": self.started_at,
            "address": self.address,
        }
        if self.pod:
            out["pod"] = self.pod
        if self.namespace:
            out["namespace"] = self.namespace
        return out


class ClaimObserver(Protocol):
    """Told of every claim a holder makes and gives up (the claim ledger, :class:`app.ledger.Ledger`): plain calls
    that must not wait or raise."""

    def claimed(self, claim: Claim, pool: IdentityPool, owner: Owner, floor_ns: int, fleet_id: str | None) -> None:
        """``claim`` of ``pool`` was made for ``owner`` in fleet ``fleet_id`` (None: not known yet); its IDs are
        dated at or after ``floor_ns`` (the time unit after its inherited high-water mark, ns since the epoch;
        negative: none)."""

    def ended(self, claim: Claim) -> None:
        """``claim`` is being given up (released, or dropped as lost or late), before the backend releases it."""


RECORD_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
"""What a fleet record's name (:meth:`LeaseBackend.read_record`) must match: it names a file or a key."""


def record_bytes(value: dict[str, Any]) -> bytes:
    """A fleet record as stored: compact JSON with sorted keys, so equal records are equal bytes (etcd compares
    values byte for byte)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def parse_record(data: bytes | str, where: str) -> dict[str, Any]:
    """A stored fleet record; NotReadyError naming ``where`` when it is not a JSON object."""
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise BackendUnavailableError(f"fleet record {where} is unreadable: {exc}") from exc
    if not isinstance(value, dict):
        raise BackendUnavailableError(f"fleet record {where} holds {type(value).__name__}, not a JSON object")
    return value


def check_record_name(name: str) -> str:
    """``name`` when it matches :data:`RECORD_NAME`; ValueError otherwise (a programming error: names are ours)."""
    if not RECORD_NAME.fullmatch(name):
        raise ValueError(f"fleet record name must match {RECORD_NAME.pattern}, got {name!r}")
    return name


REVOKED_REASON = "claim revoked by an operator"
"""The loss reason of a claim an operator revoked (``POST /v1/admin/claims/{scheme}/{identity}/revoke``): its holder
stops at once and does not claim that identity again (another node is to take it)."""

LossCallback = Callable[["Claim", str], None]
"""Called once with (the claim, why) the moment a claim is lost behind our back."""


class Claim(abc.ABC):
    """One identity held by this node for one scheme."""

    clock: Callable[[], float] = time.monotonic
    """The monotonic clock (seconds) :attr:`deadline` is on: the backend's, injected into it."""

    scheme: str
    identity: int
    key: str
    """Backend key naming the identity (etcd key, or lock-file name)."""
    high_water_mark: int
    """The mark found when the identity was claimed (native units; -1 when none was recorded)."""

    @property
    def deadline(self) -> float:
        """The :attr:`clock` reading (seconds) from which this claim must not be used. Default: never."""
        return math.inf

    @property
    @abc.abstractmethod
    def lost(self) -> bool:
        """True once the claim can no longer be trusted (lease expired/revoked, key deleted, lock gone)."""

    @property
    def lease_name(self) -> str | None:
        """The backend's name for the lease behind this claim (etcd: the lease ID in hex), None when it has none."""
        return None

    def expired_at(self) -> float | None:
        """For a claim lost with its lease: the :attr:`clock` reading (seconds) at which the backend let the lease
        expire, as near as this process can tell (etcd: the last confirmed refresh plus the TTL); None otherwise."""
        return None

    def valid(self) -> bool:
        """Not lost, and :attr:`clock` still before :attr:`deadline`."""
        return not self.lost and self.clock() < self.deadline

    def on_lost(self, callback: LossCallback) -> None:
        """Call ``callback(claim, reason)`` once, the moment the claim is lost behind our back (lease expired or
        revoked, key deleted or overwritten), at once when it already is; never for a claim we released.
        Default: a claim that cannot be lost so (an OS file lock) never calls it."""

    @abc.abstractmethod
    async def record_mark(self, mark: int) -> None:
        """Persist ``mark`` (native units) as this identity's high-water mark. Raises NotReadyError on failure."""


class LeaseBackend(abc.ABC):
    """Claims node identities. One instance per process; owned by the app's lifespan."""

    name: str
    clock: Callable[[], float] = time.monotonic
    """The monotonic clock (seconds) every claim deadline of this backend is on; the holder compares with it."""
    mark_interval: float
    """Seconds between background high-water-mark refreshes."""
    mark_horizon: float
    """Seconds ahead of the clock that a recorded mark reaches; the node may issue up to it before re-recording."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect / open state. Must not raise for an unreachable backend: claims report it instead."""

    @abc.abstractmethod
    async def claim(self, pool: IdentityPool, owner: Owner, exclude: frozenset[int] = frozenset()) -> Claim:
        """Claim one free identity from ``pool`` for ``owner``, none of ``exclude`` (refused earlier: high-water
        mark too far ahead, or already held by this node).

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

    @abc.abstractmethod
    async def read_record(self, name: str) -> dict[str, Any] | None:
        """The fleet record ``name`` (see :data:`RECORD_NAME`): a small JSON object every node of this fleet reads
        the same, kept beyond any lease; None when absent. Raises NotReadyError when the backend cannot be read now,
        or the record is not a JSON object (it must not be taken as absent)."""

    @abc.abstractmethod
    async def swap_record(self, name: str, expected: dict[str, Any] | None, value: dict[str, Any]) -> bool:
        """Write ``value`` as fleet record ``name`` when it is still ``expected`` (None: absent), in one atomic step
        (compare-and-set): True when written, False when it was something else (another node wrote first: read it
        again). Raises NotReadyError when the backend cannot be used now."""

    async def history_facts(self) -> Facts | None:
        """What the store is now (:class:`~app.storage.history.Facts`: the identity a copy or restore changes, a
        position only its own history raises), compared with the fleet's ``history`` record before anything read
        from it is trusted (:class:`~app.storage.history.HistoryGuard`). None: this backend cannot tell. Raises
        NotReadyError when the store cannot be read now."""
        return None

    async def read_witness(self) -> int:
        """The highest history generation kept outside the store (the embedded backend: a file beside the state
        directory; 0: none kept). Raises nothing."""
        return 0

    async def write_witness(self, generation: int) -> None:
        """Keep ``generation`` outside the store (see :meth:`read_witness`); default nothing. Raises
        NotReadyError when it cannot be written."""

    def member_token(self) -> str | None:
        """A token naming this process in the backend now (etcd: its lease ID; embedded: a lock file's name), which
        :meth:`has_member` of a node on the same backend confirms and one on another backend does not: a copied
        fleet ID (a cloned state directory, a restored etcd snapshot) is told apart by it. None while there is none
        (no lease)."""
        return None

    async def has_member(self, token: str) -> bool | None:
        """Whether ``token`` (another node's :meth:`member_token`) is live in this backend; None when the backend
        cannot tell now. Raises nothing."""
        return None

    async def count_held(self, pool: IdentityPool) -> int | None:
        """How many identities of ``pool``'s region slice are held now, by any node of this fleet (None when the
        backend cannot tell now). Raises nothing."""
        return None

    async def register(self, scheme: str, name: str, value: dict[str, Any]) -> None:
        """Publish information that needs no exclusivity (Wiji's random part). Default: nothing."""

    async def revoke(self, pool: IdentityPool, identity: int, by: dict[str, Any]) -> dict[str, Any]:
        """Revoke another node's claim of ``identity`` of ``pool`` so that its owner stops before anyone else may
        claim it (``by``: the revoking node's :meth:`Owner.as_dict`). Returns ``{"scheme", "kind", "identity",
        "owner", "lease", "owner_stopped", "freed", "lease_ttl_s", "seconds"}``. Raises NotClaimedError when nobody
        holds it, RevokeRefusedError when it cannot be revoked (this default: a backend without
        ``Capabilities.can_revoke``), NotReadyError when the backend cannot be used now."""
        raise RevokeRefusedError(f"the {self.name} backend cannot revoke another node's claim")

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything still held and stop background work (etcd: revoke the lease)."""

    def status(self) -> dict[str, Any]:
        """Backend state for /readyz and /v1/schemes."""
        return {"backend": self.name}
