"""The one exception tree of idmint.

::

    IdmintError
    ├── InvalidIdError          (ValueError) an ID string breaks a rule of its scheme      -> 422
    ├── InvalidOptionError      (ValueError) a count, format or scheme option is out of rule -> 422
    ├── UnknownSchemeError      (LookupError) no scheme of that name                         -> 404
    ├── UnknownSequenceError    (LookupError) no sequence of that name                       -> 404
    ├── SequenceConflictError   a sequence exists with other settings, or too many exist     -> 409
    ├── NotClaimedError         (LookupError) no node holds that identity now (admin revoke)  -> 404
    ├── UnopenedPublicIdError   (LookupError) no public-ID key in force opens the text         -> 404
    ├── RevokeRefusedError      the backend cannot revoke a claim (embedded: an OS file lock)  -> 409
    ├── FleetConflictError      the fleet's settings record cannot change while nodes use it   -> 409
    ├── BackfillCapacityError   a past time's tick is full on every backfill identity          -> 409
    ├── SequenceOverflowError   (InvalidOptionError) a sequence would pass 2**63-1            -> 422
    ├── NotReadyError           this node cannot be sure its identity is exclusive           -> 503 + Retry-After
    │   ├── LeaseLostError          the lease expired, was revoked, or its key was deleted
    │   ├── PoolExhaustedError      every identity of the pool is held by another node
    │   ├── BackendUnavailableError the lease backend cannot be reached or refused us
    │   └── TimeRangeError          the clock is outside the times a layout encodes (before its epoch, past its end)
    ├── TooManyRequestsError    a per-node or per-key limit is reached (streams, quotas)     -> 429 + Retry-After
    └── ConfigError             (ValueError) a setting breaks its rule; raised at start-up

HTTP status codes are assigned in exactly one place, :mod:`app.api.errors`; route functions carry no try blocks.
"""

from __future__ import annotations


class IdmintError(Exception):
    """Base of every error idmint raises on purpose."""


class InvalidIdError(IdmintError, ValueError):
    """An ID string does not parse: the message names the rule broken (length, alphabet, version, checksum...)."""


class InvalidOptionError(IdmintError, ValueError):
    """A request option (count, format, mode, type, after...) breaks its rule; the message names it."""


class UnknownSchemeError(IdmintError, LookupError):
    """No scheme of that name is served."""


class UnknownSequenceError(IdmintError, LookupError):
    """No sequence of that name exists in storage."""


class SequenceConflictError(IdmintError):
    """Creating a sequence failed: it exists with other settings, or IDMINT_MAX_SEQUENCES exist already."""


class SequenceOverflowError(InvalidOptionError):
    """The integers asked for would pass the sequence's maximum value (2**63-1); the message names the rule."""


class NotClaimedError(IdmintError, LookupError):
    """No node of this fleet holds that identity now (``POST /v1/admin/claims/{scheme}/{identity}/revoke``)."""


class UnopenedPublicIdError(IdmintError, LookupError):
    """A text that no public-ID key in force opens (``GET /v1/public/{text}``): not a public ID of this service."""


class FleetConflictError(IdmintError):
    """The fleet's record of a scheme's settings cannot change now: a node still holds claims under the recorded
    settings (``POST /v1/admin/fleet/settings/{scheme}``); the message names them."""


class BackfillCapacityError(IdmintError):
    """A backfill asked for more IDs in one tick (a millisecond) than the backfill identities have left in it, or
    for a tick a storage fence retired (at or before its high-water-mark floor); the message names the limit or the
    fence. Nothing of the request was handed out."""


class RevokeRefusedError(IdmintError):
    """A claim cannot be revoked on this backend (the embedded backend's claims are OS file locks)."""


class NotReadyError(IdmintError):
    """This node may not issue for a scheme right now.

    ``reason`` is a short human sentence; ``retry_after`` is the number of seconds a client should wait (>= 1).
    """

    def __init__(self, reason: str, retry_after: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = max(1, int(retry_after))


class LeaseLostError(NotReadyError):
    """The lease behind a node identity expired, was revoked, or its claim key was deleted."""


class PoolExhaustedError(NotReadyError):
    """Every identity in the pool is held by another node."""


class BackendUnavailableError(NotReadyError):
    """The lease backend (etcd) is unreachable, timed out, or rejected our credentials."""


class TimeRangeError(NotReadyError):
    """The clock is outside the times a scheme's layout can encode: before its epoch, or past the end of its time
    field (a snowflake layout with few time bits, ``instagram`` from 2046-06-27T17:00:49Z). Only that scheme stops."""


class TooManyRequestsError(IdmintError):
    """A limit of this node (concurrent streams) or of the caller's API key is reached; ``retry_after`` seconds."""

    def __init__(self, reason: str, retry_after: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = max(1, int(retry_after))


class UpgradeRequiredError(IdmintError):
    """The request needs a later HTTP version than it came in: a stream over HTTP/1.0, which has no chunked transfer
    coding to tell a complete stream from a cut one. ``upgrade``: the protocol to ask again with (``HTTP/1.1``)."""

    def __init__(self, reason: str, upgrade: str = "HTTP/1.1") -> None:
        super().__init__(reason)
        self.upgrade = upgrade


class ConfigError(IdmintError, ValueError):
    """A setting breaks its rule; raised once, at start-up."""
