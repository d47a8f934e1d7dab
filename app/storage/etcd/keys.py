"""The etcd key layout and values, as pure functions of a :class:`~app.storage.lease.IdentityPool` (no scheme names).

Claim key ``<namespace><pool.key_prefix><segment>``, mark key ``<namespace><pool.mark_prefix><segment>``, where
``segment = pool.key_format.format(identity)``; registrations ``<namespace>idmint/<scheme>/<name>``. Values are
JSON (UTF-8); see :mod:`app.storage.etcd` for the whole layout and its java-uniqueid compatibility.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from app.errors import BackendUnavailableError, NotReadyError
from app.schemes.pool import IdentityPool
from app.storage.draw import SMALL_POOL_SIZE
from app.storage.lease import Owner

REGISTER_PREFIX = "idmint/"
REVOKED_MARK = b'{"revoked":'
"""How a claim key overwritten by ``POST /v1/admin/claims/.../revoke`` begins (:mod:`app.storage.etcd.revoke`): its
owner's watch reads it as :data:`~app.storage.lease.REVOKED_REASON`."""


def pool_prefix(namespace: str, pool: IdentityPool) -> str:
    """The key prefix under which ``pool``'s claims live (one range read lists them).

    Raises ValueError for a pool without ``key_prefix`` (the node fills it from the scheme's identity plan).
    """
    if not pool.key_prefix or not pool.mark_prefix:
        raise ValueError(f"{pool.scheme}: IdentityPool.key_prefix and mark_prefix are needed for etcd claims")
    return namespace + pool.key_prefix


def encode_identity(pool: IdentityPool, identity: int) -> str:
    """The last key segment naming ``identity`` (``pool.key_format``: decimal, or e.g. 11 uppercase hex digits)."""
    return pool.key_format.format(identity)


def decode_identity(pool: IdentityPool, segment: str) -> int | None:
    """Inverse of :func:`encode_identity`; None for a segment that is not one of ours (exact round trip only)."""
    hexadecimal = pool.key_format.rstrip("}").endswith(("x", "X"))
    try:
        identity = int(segment, 16 if hexadecimal else 10)
    except ValueError:
        return None
    return identity if identity >= 0 and encode_identity(pool, identity) == segment else None


def claim_key(namespace: str, pool: IdentityPool, identity: int) -> str:
    """``<namespace><key_prefix><segment>``: the claim key of ``identity``, on the owner's lease."""
    return pool_prefix(namespace, pool) + encode_identity(pool, identity)


def mark_key(namespace: str, pool: IdentityPool, identity: int) -> str:
    """``<namespace><mark_prefix><segment>``: the lease-free key holding ``identity``'s high-water mark."""
    pool_prefix(namespace, pool)
    return namespace + pool.mark_prefix + encode_identity(pool, identity)


def fleet_key(namespace: str) -> str:
    """``<namespace>idmint/fleet``: the fleet ID, on no lease."""
    return f"{namespace}{REGISTER_PREFIX}fleet"


def read_fleet_id(value: bytes, key: str) -> str:
    """The fleet ID in a fleet key's value (``{"fleet_id": "<uuid>", ...}``). Raises BackendUnavailableError for
    anything else: a fleet whose ID cannot be read cannot show peers who it is."""
    try:
        return str(uuid.UUID(str(json.loads(value)["fleet_id"])))
    except (ValueError, KeyError, TypeError) as exc:
        raise BackendUnavailableError(f"fleet key {key} holds no fleet ID: {exc}") from exc


def record_key(namespace: str, name: str) -> str:
    """``<namespace>idmint/records/<name>``: a fleet record (:meth:`~app.storage.lease.LeaseBackend.read_record`),
    on no lease."""
    return f"{namespace}{REGISTER_PREFIX}records/{name}"


def register_key(namespace: str, scheme: str, name: str) -> str:
    """``idmint/<scheme>/<name>``: information published on the lease without exclusivity."""
    return f"{namespace}{REGISTER_PREFIX}{scheme}/{name}"


def parse_allowed_groups(value: str) -> list[int]:
    """Parse a ``cluster-id`` value as java-uniqueid does (``ClusterID.parseIntegers``): comma list, trimmed.

    Raises ValueError for anything else.
    """
    return [int(part.strip()) for part in value.split(",")]


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_json(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def claim_value(
    owner: Owner, pool: IdentityPool, identity: int, lease_hex: str, claimed_at: str, mark: int = -1
) -> bytes:
    """The claim key's value: who holds it, on which lease, and the last mark it recorded (-1: none yet)."""
    return to_json(
        {
            "holder": owner.as_dict(),
            "scheme": pool.scheme,
            "kind": pool.kind,
            "identity": identity,
            "lease": lease_hex,
            "claimed_at": claimed_at,
            "high_water_mark": mark,
        }
    )


def mark_value(owner: Owner, lease_hex: str, mark: int) -> bytes:
    """The mark key's value: ``{"high_water_mark", "holder", "lease"}``."""
    return to_json({"high_water_mark": mark, "holder": owner.as_dict(), "lease": lease_hex})


def read_mark(value: bytes | None, key: str) -> int:
    """The high-water mark stored in a mark key's ``value`` (-1 when the key is absent).

    Raises BackendUnavailableError for a value that is not a mark: it must not be taken as "no mark".
    """
    if value is None:
        return -1
    try:
        mark = json.loads(value)["high_water_mark"]
        if not isinstance(mark, int) or isinstance(mark, bool):
            raise TypeError(f"not an integer: {mark!r}")
        return mark
    except (ValueError, KeyError, TypeError) as exc:
        raise BackendUnavailableError(f"high-water mark key {key} is unreadable: {exc}") from exc


def holder_of(value: bytes) -> str:
    """A short description of who holds a key, from its value (empty for java-uniqueid)."""
    if not value:
        return "a client that left no holder details (java-uniqueid writes an empty value)"
    try:
        holder = json.loads(value)["holder"]
        return f"{holder['host']} pid {holder['pid']}" + (f" ({holder['address']})" if holder.get("address") else "")
    except (ValueError, KeyError, TypeError):
        return "a client with an unrecognised value"


def check_allowed_groups(namespace: str, pool: IdentityPool, value: bytes | None, retry_after: int) -> None:
    """java-uniqueid's ``cluster-id`` key (``value``, None when absent): absent = any group; else ``pool``'s group
    must be listed. Raises NotReadyError (with ``retry_after`` s) naming the key otherwise."""
    if value is None:
        return
    key = namespace + (pool.allowed_groups_key or "")
    try:
        allowed = parse_allowed_groups(value.decode())
        group = int(pool.group)
    except ValueError:
        raise NotReadyError(
            f"etcd key {key} holds {value!r}, not a comma-separated list of cluster IDs", retry_after=retry_after
        ) from None
    if group not in allowed:
        raise NotReadyError(
            f"cluster ID {group} is not listed in etcd key {key} ({value.decode()!r}); "
            f"set IDMINT_CLUSTER_ID to one of {', '.join(map(str, allowed))} or add it to the key",
            retry_after=retry_after,
        )


def exhausted_reason(pool: IdentityPool, exclude: frozenset[int], held: dict[int, bytes], tries: int) -> str:
    """Why no identity of ``pool`` could be claimed: ``held`` (identity -> claim value) as read, ``exclude``
    refused, after ``tries`` attempts."""
    where = f" in cluster {pool.group}" if pool.allowed_groups_key else f" in group {pool.group}" if pool.group else ""
    if pool.candidates is not None:
        parts = []
        for identity in pool.candidates:
            if identity in held:
                parts.append(f"{identity} is held by {holder_of(held[identity])}")
            elif identity in exclude:
                parts.append(f"{identity} was refused (high-water mark ahead of our clock)")
        what = "static " if pool.static is not None else ""
        return f"{pool.scheme}: {what}{pool.kind}{where} unavailable: " + "; ".join(parts or ["no candidates"])
    size = pool.maximum - pool.minimum + 1
    in_range = sum(1 for i in held if pool.minimum <= i <= pool.maximum)
    refused = f", {len(exclude)} refused" if exclude else ""
    tried = f" after {tries} random draw(s)" if pool.draw == "random" and size > SMALL_POOL_SIZE else ""
    return (
        f"{pool.scheme}: no free {pool.kind}{where}{tried}: {in_range} of {size} held "
        f"({pool.minimum}..{pool.maximum}){refused}"
    )


def revoked_value(by: dict[str, Any], owner: bytes, at: str) -> bytes:
    """The value a revoked claim key holds until the owner stopped: who revoked it, whose claim it was, when."""
    try:
        was = json.loads(owner).get("holder")
    except (ValueError, AttributeError):
        was = None
    return b'{"revoked":true,' + to_json({"by": by, "was": was, "at": at})[1:]
