"""The claim ledger as decode shows it: ``issued_by``, the ledger's verdict and each reading's plausibility.

A decode object (:mod:`app.decoding`) of a scheme whose IDs carry a leased identity gets::

    "issued_by": <ClaimRecord as a dict> | null,
    "ledger": {"status": "confirmed" | "no_claim" | "future" | "before_ledger" | "no_ledger", "reason", "words"}

and every reading gets ``"plausibility": {"rank", "reason"}``: rank 0 when the ledger confirms it, 1 when it is
dated inside the fleet's lifetime (from the ledger's first moment to now), 2 otherwise (folded on the page). The
readings of one ID are ordered by rank (stable: the decoder's order within a rank).

The identity is the decoded field named by the scheme's pool (``fields[pool.kind]``) and the time the decode
object's ``timestamp`` (RFC 3339, at the scheme's precision): what the scheme decoders already return.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from app.ledger import Ledger
from app.ledger.index import FUTURE_TOLERANCE_NS, REASON_NO_LEDGER
from app.schemes.base import Scheme
from app.schemes.pool import IdentityPool
from app.storage.ledger import NS_IN_S

GROUP_FIELDS: dict[str, Callable[[int], str]] = {
    "cluster_id": str,  # eight-byte: the pool's group is the cluster ID in decimal
    "domain_hash": lambda value: f"{value:08x}",  # SIQ: the pool's group is the domain hash, 8 hex digits
}
"""Decoded fields that carry the group an identity is claimed within, as the pool names it (a snowflake layout is
not carried in its IDs: no group)."""

RANK_CONFIRMED = 0
RANK_IN_LIFETIME = 1
RANK_REST = 2


def timestamp_ns(stamp: str | None) -> int | None:
    """ns since the epoch of a decode object's ``timestamp`` (``2026-11-25T12:01:07.123Z``); None when absent."""
    if not stamp:
        return None
    try:
        whole = datetime.fromisoformat(stamp[:19] + "+00:00")
    except ValueError:
        return None
    fraction = stamp[20:-1] if len(stamp) > 20 and stamp[19] == "." else ""
    return int(whole.timestamp()) * NS_IN_S + (int(fraction.ljust(9, "0")[:9]) if fraction.isdigit() else 0)


class LedgerView:
    """Annotates decode objects for one request. ``pools``: scheme -> the identity pool this node claims from;
    ``schemes``: the node's schemes (their timestamp precision); ``others``: schemes read with decode options
    (another layout: their identities are not this fleet's to look up)."""

    def __init__(
        self,
        ledger: Ledger | None,
        pools: Mapping[str, IdentityPool],
        schemes: Mapping[str, Scheme],
        others: Collection[str] = (),
    ) -> None:
        self.ledger = ledger
        self.pools = pools
        self.schemes = schemes
        self.others = others

    def _reading(self, candidate: dict[str, Any]) -> tuple[IdentityPool | None, int | None, int | None]:
        """(pool, identity, timestamp ns) of a decode object; pool None when its scheme leases no identity here."""
        name = candidate["scheme"]
        t = timestamp_ns(candidate.get("timestamp"))
        pool = None if name in self.others else self.pools.get(name)
        identity = candidate.get("fields", {}).get(pool.kind) if pool is not None else None
        if pool is None or not isinstance(identity, int):
            return None, None, t
        return pool, identity, t

    async def prepare(self, candidates: list[dict[str, Any]]) -> None:
        """One bounded ledger refresh when a reading is newer than the ledger's index (a claim made moments ago by
        another node is then known); never one per ID."""
        await self.refresh(self.newest(candidates))

    def newest(self, candidates: list[dict[str, Any]]) -> int:
        """The time (ns) of the newest reading of ``candidates`` that the ledger may hold a claim for (a leased
        identity, not in the future); -1 when none. The largest over several lists is the one :meth:`refresh`
        needs for all of them."""
        if self.ledger is None:
            return -1
        now = self.ledger.clock()
        newest = -1
        for candidate in candidates:
            pool, _identity, t = self._reading(candidate)
            if pool is not None and t is not None and t <= now + FUTURE_TOLERANCE_NS:
                newest = max(newest, t)
        return newest

    async def refresh(self, newest: int) -> None:
        """The ledger refresh :meth:`prepare` makes, for the newest reading's time (:meth:`newest`; -1: none)."""
        if self.ledger is not None and newest >= 0:
            await self.ledger.refresh_for(newest)

    def annotate(self, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``candidates`` annotated in place and returned ordered by plausibility."""
        ledger = self.ledger
        now = ledger.clock() if ledger is not None else None
        since = ledger.since_ns if ledger is not None else None
        ranked = []
        for candidate in candidates:
            pool, identity, t = self._reading(candidate)
            confirmed = False
            verdict_reason = None
            if pool is not None and identity is not None:
                if ledger is None or t is None:
                    candidate["issued_by"] = None
                    candidate["ledger"] = {"status": "no_ledger", "reason": REASON_NO_LEDGER, "words": REASON_NO_LEDGER}
                else:
                    scheme = self.schemes.get(candidate["scheme"])
                    unit = 10 ** (9 - scheme.timestamp_digits) if scheme is not None else 1
                    verdict = ledger.verdict(candidate["scheme"], identity, t, unit, _group(candidate))
                    candidate["issued_by"] = verdict.record.as_dict() if verdict.record is not None else None
                    candidate["ledger"] = verdict.as_dict()
                    confirmed = verdict.record is not None
                    verdict_reason = verdict.reason
            rank, reason = self._rank(t, now, since, confirmed, candidate.get("ledger"), verdict_reason)
            candidate["plausibility"] = {"rank": rank, "reason": reason}
            ranked.append((rank, candidate))
        ranked.sort(key=lambda pair: pair[0])
        return [c for _, c in ranked]

    @staticmethod
    def _rank(
        t: int | None,
        now: int | None,
        since: int | None,
        confirmed: bool,
        verdict: dict[str, Any] | None,
        verdict_reason: str | None,
    ) -> tuple[int, str]:
        if confirmed and verdict is not None:
            return RANK_CONFIRMED, f"the claim ledger confirms it: {verdict['words']}"
        if t is None:
            return RANK_REST, "carries no timestamp"
        stamp = _day(t)
        if now is not None and t > now + FUTURE_TOLERANCE_NS:
            return RANK_REST, f"dated {stamp}, in the future"
        if since is not None and t < since:
            return RANK_REST, f"dated {stamp}, before this fleet's ledger began ({_day(since)})"
        if since is None and now is None and t < 0:
            return RANK_REST, f"dated {stamp}"
        tail = f"; {verdict_reason}" if verdict_reason else ""
        return RANK_IN_LIFETIME, f"dated {stamp}, inside this fleet's lifetime{tail}"


def _group(candidate: dict[str, Any]) -> str | None:
    fields = candidate.get("fields", {})
    for name, form in GROUP_FIELDS.items():
        value = fields.get(name)
        if isinstance(value, int):
            return form(value)
    return None


def _day(ns: int) -> str:
    try:
        return datetime.fromtimestamp(ns // NS_IN_S, tz=UTC).strftime("%Y-%m-%d")
    except (OverflowError, OSError, ValueError):
        return "out of range"
