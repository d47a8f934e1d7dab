"""The claim ledger's in-memory index, which decode asks, and its verdicts (records: :mod:`app.storage.ledger`)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from app.storage.ledger import NS_IN_S, ClaimRecord

REASON_NO_CLAIM = "no claim of this identity at that time"
REASON_FUTURE = "timestamp in the future"
REASON_BEFORE = "the ledger does not reach back that far"
REASON_NO_LEDGER = "this node keeps no claim ledger"

FUTURE_TOLERANCE_NS = 10 * NS_IN_S
"""A reading dated more than this past now is "in the future" for the ledger (clocks of one fleet agree closer)."""


@dataclass(frozen=True)
class Verdict:
    """The ledger's answer for one reading: the record whose claim covers it, else why none does."""

    record: ClaimRecord | None
    reason: str | None

    def as_dict(self) -> dict[str, Any]:
        """``{"status": "confirmed" | "no_claim" | "future" | "before_ledger" | "no_ledger", "reason", "words"}``."""
        if self.record is not None:
            return {"status": "confirmed", "reason": None, "words": self.record.words}
        status = {
            REASON_NO_CLAIM: "no_claim",
            REASON_FUTURE: "future",
            REASON_BEFORE: "before_ledger",
        }.get(self.reason or "", "no_ledger")
        return {"status": status, "reason": self.reason, "words": self.reason}


class LedgerIndex:
    """The latest version of every record, by (scheme, identity), sorted by claim time: a lookup is a bisect."""

    def __init__(self) -> None:
        self.records: dict[str, ClaimRecord] = {}
        self._by_identity: dict[tuple[str, int], list[ClaimRecord]] = {}
        self._dirty: set[tuple[str, int]] = set()

    def __len__(self) -> int:
        return len(self.records)

    def add(self, record: ClaimRecord) -> None:
        old = self.records.get(record.record)
        if old is not None and old.end is not None and record.end is None:
            return  # an ended record is never reopened by an older version read late
        self.records[record.record] = record
        key = (record.scheme, record.identity)
        bucket = self._by_identity.setdefault(key, [])
        if old is not None:
            bucket[:] = [r for r in bucket if r.record != record.record]
        bucket.append(record)
        self._dirty.add(key)

    def drop(self, record_id: str) -> None:
        old = self.records.pop(record_id, None)
        if old is not None:
            key = (old.scheme, old.identity)
            self._by_identity[key] = [r for r in self._by_identity.get(key, []) if r.record != record_id]

    def open_records(self) -> list[ClaimRecord]:
        return [r for r in self.records.values() if r.end is None]

    def _bucket(self, key: tuple[str, int]) -> list[ClaimRecord]:
        bucket = self._by_identity.get(key, [])
        if key in self._dirty:
            bucket.sort(key=lambda r: r.covers_from_ns)
            self._dirty.discard(key)
        return bucket

    def next_claim_ns(self, record: ClaimRecord) -> int | None:
        """When the next claim of ``record``'s identity (same scheme, kind and group) began after it, None when
        none did: the identity is exclusive, so ``record``'s claim had ended by then."""
        later = [
            r.claimed_at_ns
            for r in self._by_identity.get((record.scheme, record.identity), [])
            if r.record != record.record
            and r.kind == record.kind
            and r.group == record.group
            and r.claimed_at_ns > record.claimed_at_ns
        ]
        return min(later, default=None)

    def covering(
        self, scheme: str, identity: int, t_ns: int, unit_ns: int, now_ns: int, group: str | None = None
    ) -> ClaimRecord | None:
        """The record of ``identity`` whose claim covers ``t_ns`` (a reading at the precision ``unit_ns``): of the
        claims begun by then, the latest that had not ended before it (a lost claim's end is an upper bound; the
        next holder only issues above the mark, so the latest start wins). An open claim covers up to ``now_ns``.
        ``group``: the group the ID carries (eight-byte's cluster ID, SIQ's domain hash), None when it carries none."""
        bucket = self._bucket((scheme, identity))
        if group is not None:
            bucket = [r for r in bucket if r.group == group]
        if not bucket:
            return None
        starts = [r.covers_from_ns for r in bucket]
        i = bisect.bisect_right(starts, t_ns + unit_ns - 1)
        for record in reversed(bucket[max(0, i - 4) : i]):
            end = now_ns + FUTURE_TOLERANCE_NS if record.ended_at_ns is None else record.ended_at_ns
            if t_ns <= end:
                return record
        return None
