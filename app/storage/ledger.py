"""The claim ledger's record, its store interface and a fake store beside it (the ledger's logic above the store:
:mod:`app.ledger`).

A :class:`ClaimRecord` says who held one identity of one scheme, from when to when::

    {"record": "<claimed_at ns, 20 digits>-<pid>-<8 hex>", "scheme": "<scheme>", "kind": "<identity kind>",
     "group": "<group>", "identity": <int>, "region": 0 | null, "fleet_id": "<uuid>" | null,
     "owner": {"host", "pid", "version", "started_at", "address", "pod"?, "namespace"?},
     "lease": "694d8b2c1f3e0a11" | null, "claimed_at": "<RFC 3339>", "claimed_at_ns": <int>,
     "ended_at": "<RFC 3339>" | null, "ended_at_ns": <int> | null, "end": null | "released" | "lost",
     "end_reason": "<text>", "backfill": true}

``backfill`` (present only when true) marks a claim of a backfill identity (:mod:`app.issuing.backfill`): its IDs
carry past times, so it covers every time before its end, and decode says the ID was backfilled.

Times are the owner's generator clock (ns since the Unix epoch): the clock its IDs' timestamps come from. A record
is written when the claim is made (``end`` null) and written again, whole, when it ends; the later version wins.

    LedgerStore           -- keeps records beyond any lease (one per process, owned by :class:`app.ledger.Ledger`)
     +-- MemoryLedgerStore    (this module: the fake for tests of code above the interface)
     +-- EmbeddedLedgerStore  (app.storage.embedded.ledger: append-only daily files in the state directory)
     +-- EtcdLedgerStore      (app.storage.etcd.ledger: keys under <namespace>idmint/ledger/, on no lease)
"""

from __future__ import annotations

import abc
import functools
import json
import secrets
from dataclasses import dataclass, fields, replace
from typing import Any

from app.times import rfc3339

NS_IN_S = 1_000_000_000
NS_IN_DAY = 86_400 * NS_IN_S

END_RELEASED = "released"
END_LOST = "lost"

BACKFILL_COVERS_FROM_NS = -(2**63)
"""Where a backfill claim's cover begins: any past time."""
LOOKBACK_TOLERANCE_NS = NS_IN_S
"""A generator may date IDs up to its lookback before it was built (eight-byte's IDMINT_EIGHT_BYTE_LOOKBACK_MS,
at most 1 s; snowflake's lookback units): a claim covers that much before its claim time, never below its mark."""


@dataclass(frozen=True)
class ClaimRecord:
    """One claim of ``identity`` (``kind`` within ``group``) of ``scheme`` by ``owner`` (see the module docstring)."""

    record: str
    scheme: str
    kind: str
    group: str
    identity: int
    region: int | None
    fleet_id: str | None
    owner: dict[str, Any]
    lease: str | None
    claimed_at_ns: int
    ended_at_ns: int | None = None
    end: str | None = None
    end_reason: str = ""
    floor_ns: int = -1
    """Its IDs are dated at or after this (the time unit after the high-water mark inherited with the claim, ns
    since the epoch; -1: none)."""
    backfill: bool = False
    """A claim of a backfill identity: its IDs carry past times (any before its end)."""

    @property
    def covers_from_ns(self) -> int:
        """The earliest timestamp an ID of this claim can carry: above the inherited mark, and no earlier than a
        generator's lookback (unused time units filled late) before the claim; any time for a backfill claim."""
        if self.backfill:
            return BACKFILL_COVERS_FROM_NS
        return max(self.floor_ns, self.claimed_at_ns - LOOKBACK_TOLERANCE_NS)

    @staticmethod
    def new_id(claimed_at_ns: int, pid: int) -> str:
        """A record ID, unique across processes, that sorts by claim time."""
        return f"{claimed_at_ns:020d}-{pid}-{secrets.token_hex(4)}"

    @property
    def open(self) -> bool:
        return self.end is None

    def ended(self, end: str, at_ns: int, reason: str = "") -> ClaimRecord:
        """This record, ended (``end``: "released" or "lost") at ``at_ns`` (never before it began)."""
        return replace(self, end=end, ended_at_ns=max(at_ns, self.claimed_at_ns), end_reason=reason)

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (a fresh copy of one built once: decode shows a record per ID)."""
        return dict(self._dict)

    @functools.cached_property
    def _dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["owner"] = dict(self.owner)
        out["claimed_at"] = rfc3339(self.claimed_at_ns, 3)
        out["ended_at"] = rfc3339(self.ended_at_ns, 3)
        if not self.backfill:
            del out["backfill"]
        return out

    def to_json(self) -> bytes:
        return json.dumps(self.as_dict(), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> ClaimRecord:
        """Inverse of :meth:`to_json`. Raises ValueError for anything that is not a record."""
        try:
            raw = json.loads(data)
            return cls(
                record=str(raw["record"]),
                scheme=str(raw["scheme"]),
                kind=str(raw["kind"]),
                group=str(raw["group"]),
                identity=_int(raw["identity"]),
                region=None if raw.get("region") is None else _int(raw["region"]),
                fleet_id=raw.get("fleet_id"),
                owner=dict(raw["owner"]),
                lease=raw.get("lease"),
                claimed_at_ns=_int(raw["claimed_at_ns"]),
                ended_at_ns=None if raw.get("ended_at_ns") is None else _int(raw["ended_at_ns"]),
                end=raw.get("end"),
                end_reason=str(raw.get("end_reason", "")),
                floor_ns=_int(raw.get("floor_ns", -1)),
                backfill=raw.get("backfill") is True,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a claim record: {exc!r}") from exc

    @functools.cached_property
    def words(self) -> str:
        """The record in words: ``issued by pod orders-7f9c, idmint 0.4.1, claim held 12:01:07 to 14:33:10 UTC``."""
        owner = self.owner
        who = f"pod {owner['pod']}" if owner.get("pod") else f"{owner.get('host', '?')} pid {owner.get('pid', '?')}"
        start = rfc3339(self.claimed_at_ns, 3) or "?"
        if self.ended_at_ns is None:
            held = f"claim held since {_short(start)} UTC"
        else:
            end = rfc3339(self.ended_at_ns, 3) or "?"
            same_day = start[:10] == end[:10]
            held = f"claim held {_short(start)} to {end[11:19] if same_day else _short(end)} UTC"
            if self.end == END_LOST:
                held += " (lost)"
        how = "backfill: back-dated by" if self.backfill else "issued by"
        return f"{how} {who}, idmint {owner.get('version', '?')}, {held}"


def _short(stamp: str) -> str:
    """``2026-11-25 12:01:07`` from an RFC 3339 stamp."""
    return f"{stamp[:10]} {stamp[11:19]}"


def _int(value: Any) -> int:
    if type(value) is not int:  # bool is an int subclass, and must not pass
        raise ValueError(f"not an integer: {value!r}")
    return value


class LedgerStore(abc.ABC):
    """Where claim records are kept beyond any lease. Every method raises OSError or
    :class:`~app.errors.NotReadyError` when the storage cannot be used now; the ledger retries."""

    name: str

    async def start(self) -> None:
        """Open the storage (create what it needs)."""

    @abc.abstractmethod
    async def write(self, record: ClaimRecord) -> None:
        """Store ``record`` (a later version of the same :attr:`ClaimRecord.record` replaces the earlier)."""

    @abc.abstractmethod
    async def read(self, full: bool) -> list[ClaimRecord]:
        """Records written since the last read (``full``: every record kept)."""

    @abc.abstractmethod
    async def compact(self, before_ns: int, records: list[ClaimRecord]) -> int:
        """Drop every record of ``records`` (the latest versions) that ended before ``before_ns``, keeping open
        ones; returns how many were dropped."""

    @abc.abstractmethod
    async def since_ns(self, now_ns: int) -> int:
        """When this ledger began (written once, as ``now_ns``, by the first process to ask)."""

    async def owner_alive(self, record: ClaimRecord) -> tuple[bool | None, int | None]:
        """Whether ``record``'s owner still holds it: (alive or None when it cannot tell, when its lease expires
        or, for a gone owner, expired, as the backend sees it (ns, None when unknown))."""
        return None, None

    async def close(self) -> None:
        """Release what :meth:`start` opened."""


class MemoryLedgerStore(LedgerStore):
    """Records in a dict: the fake beside :class:`LedgerStore`. ``fail`` > 0 makes that many writes raise OSError."""

    name = "memory"

    def __init__(self) -> None:
        self.records: dict[str, ClaimRecord] = {}
        self.fail = 0
        self._since: int | None = None
        self._unread: list[ClaimRecord] = []

    async def write(self, record: ClaimRecord) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise OSError("memory ledger store told to fail")
        self.records[record.record] = record
        self._unread.append(record)

    async def read(self, full: bool) -> list[ClaimRecord]:
        out = list(self.records.values()) if full else self._unread
        self._unread = []
        return out

    async def compact(self, before_ns: int, records: list[ClaimRecord]) -> int:
        dropped = [r for r in records if r.ended_at_ns is not None and r.ended_at_ns < before_ns]
        for r in dropped:
            self.records.pop(r.record, None)
        return len(dropped)

    async def since_ns(self, now_ns: int) -> int:
        if self._since is None:
            self._since = now_ns
        return self._since
