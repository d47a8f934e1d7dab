"""The storage fence (``idmint storage fence``): accept a store that went back in time, after raising what its old
history may have handed out past.

:func:`plan` reads what would change, :func:`apply` does it, in this order (the history record last, so that no
node resumes before the rest is done):

1. the claim ledger: every record still open (its claim was live in the old history) ends, ``end`` ``"fenced"``;
2. sequences (the caller's part: :mod:`app.sequences.fence`);
3. the fleet's ``history`` record (:mod:`app.storage.history`): the store's identity now, a generation above any
   seen (and the witness raised to it), and the fence: its ID and time, the **high-water-mark floor** (every claim's
   mark is at least it, whichever identity and whatever its own record holds, so identities first claimed after
   the backup are covered too), the sequence gap and the gapless points left to be set.

The floor is the fence's clock plus a margin: a node of the old history recorded marks up to its own clock plus the
backend's mark horizon (``mark_horizon``) before issuing, so the floor must pass every such clock. The default
margin is that horizon plus ``IDMINT_MAX_CLOCK_WAIT``, the clock difference the fleet already tolerates between
nodes; a fleet whose clocks may differ by more needs a larger ``--margin``. Nodes whose clocks are behind the floor
by more than ``IDMINT_MAX_CLOCK_WAIT`` wait until they are not (503 + Retry-After), as for any mark ahead.

May import: :mod:`app.errors`, :mod:`app.storage` (history, lease, ledger).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from app.errors import NotReadyError
from app.storage.base import Storage
from app.storage.history import HISTORY_RECORD, compare, fence_of, words
from app.storage.lease import Facts
from app.storage.ledger import ClaimRecord
from app.times import rfc3339

PLAN_TRIES = 3
"""Reads of the store's facts a plan tries before it gives up (NotReadyError)."""
END_FENCED = "fenced"
"""The ``end`` of a claim-ledger record closed by a fence."""
NS_IN_S = 1_000_000_000


@dataclass
class FencePlan:
    """What a fence would do (see the module)."""

    backend: str
    facts: Facts
    record: dict[str, Any] | None
    changed: list[str]
    now_ns: int
    margin_s: float
    open_claims: list[ClaimRecord] = field(default_factory=list)
    witness: int = 0

    @property
    def mark_floor_ns(self) -> int:
        return self.now_ns + int(self.margin_s * NS_IN_S)

    @property
    def since_ns(self) -> int:
        """When the store's history record was last checked (ns; roughly when a backup of it was taken), or a year
        before now when it does not say."""
        checked = (self.record or {}).get("checked_at_ns")
        return checked if type(checked) is int and checked <= self.now_ns else self.now_ns - 366 * 86_400 * NS_IN_S

    def lines(self) -> list[str]:
        """What the plan finds, in words."""
        out = [f"storage: {self.backend}, {words(self.facts)}"]
        if self.record is None:
            out.append("history record: none yet (a fresh store, or one restored from before the fleet recorded it)")
        elif self.changed:
            out.append("history: CHANGED since the fleet recorded it: " + "; ".join(self.changed))
        else:
            out.append("history: unchanged since the fleet recorded it (a fence is not needed, and harmless)")
        last = fence_of(self.record)
        if last:
            out.append(f"last fence: {last.get('at')} (ID {last.get('id')})")
        out.append(
            f"high-water marks: every one raised to at least {rfc3339(self.mark_floor_ns, 3)} (the fence's clock "
            f"{rfc3339(self.now_ns, 3)} plus a margin of {self.margin_s:g} s)"
        )
        out.append(f"claim ledger: {len(self.open_claims)} record(s) still open end as {END_FENCED!r}")
        return out


async def plan(storage: Storage, now_ns: int, margin_s: float) -> FencePlan:
    """Read what a fence of ``storage`` at ``now_ns`` (the fence's clock, ns since the epoch) would change. Raises
    NotReadyError when the store cannot be read."""
    leases = storage.leases
    for attempt in range(PLAN_TRIES):  # a first call of a process can be slow (connecting, lazy imports)
        try:
            facts = await leases.history_facts()
            break
        except NotReadyError:
            if attempt == PLAN_TRIES - 1:
                raise
            await asyncio.sleep(1.0)
    if facts is None:
        facts = Facts({})
    record = await leases.read_record(HISTORY_RECORD)
    witness = await leases.read_witness()
    changed = compare(record, facts, -1, -1, witness).changed if record is not None else []
    if record is None and witness > 0:
        changed = [f"the fleet's history record is gone, though generation {witness} of it was seen"]
    await storage.ledger.start()
    latest: dict[str, ClaimRecord] = {}
    for found in await storage.ledger.read(True):
        old = latest.get(found.record)
        if old is None or old.open:  # the later version wins, but an ended record never opens again
            latest[found.record] = found
    open_claims = [r for r in latest.values() if r.open]
    return FencePlan(storage.name, facts, record, changed, now_ns, margin_s, open_claims, witness)


async def end_claims(storage: Storage, fence: FencePlan) -> int:
    """Step 1: end every open claim-ledger record as fenced. Returns how many."""
    reason = f"storage went back in time; ended by the storage fence of {rfc3339(fence.now_ns, 3)}"
    for record in fence.open_claims:
        await storage.ledger.write(record.ended(END_FENCED, max(record.claimed_at_ns, fence.now_ns), reason))
    return len(fence.open_claims)


async def write_history(
    storage: Storage, fence: FencePlan, sequence_gap: int, gapless: list[tuple[str, str | None]], fence_id: str
) -> dict[str, Any]:
    """Step 3: record the store's identity now with the fence (compare-and-set over the record the plan read; a
    record changed since raises RuntimeError: run the fence again). Returns the record written."""
    leases = storage.leases
    record = fence.record
    generation = max(fence.witness, (record or {}).get("generation", 0) or 0) + 1
    value: dict[str, Any] = {
        "backend": storage.name,
        "identity": fence.facts.identity,
        "position": fence.facts.position,
        "generation": generation,
        "checked_at_ns": fence.now_ns,
        "fence": {
            "id": fence_id,
            "at": rfc3339(fence.now_ns, 3),
            "at_ns": fence.now_ns,
            "mark_floor_ns": fence.mark_floor_ns,
            "margin_s": fence.margin_s,
            "sequence_gap": sequence_gap,
            "gapless": [list(item) for item in gapless],
            "changed": fence.changed,
        },
    }
    if not await leases.swap_record(HISTORY_RECORD, record, value):
        raise RuntimeError("the fleet's history record changed while the fence ran (a node is running?): run it again")
    await leases.write_witness(generation)
    return value


async def lift_gapless(storage: Storage, name: str, period: str | None) -> bool:
    """Remove (``name``, ``period``) from the last fence's gapless points left to be set; False when it was not
    there (then setval of a gapless sequence is refused: it would skip integers)."""
    leases = storage.leases
    for _ in range(5):
        record = await leases.read_record(HISTORY_RECORD)
        fence = fence_of(record)
        pending = [item for item in fence.get("gapless") or [] if isinstance(item, list)]
        if [name, period] not in pending:
            return False
        value = {**(record or {}), "fence": {**fence, "gapless": [p for p in pending if p != [name, period]]}}
        if await leases.swap_record(HISTORY_RECORD, record, value):
            return True
    raise RuntimeError("the fleet's history record keeps changing: try again")
