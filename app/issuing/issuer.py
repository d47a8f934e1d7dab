"""The issuer of one scheme: :class:`Issuer` asks the :class:`~app.issuing.holder.IdentityHolder` it is given
whether the scheme may issue now, issues from its generator (waiting for the clock when a scheme's per-tick
sequence runs out, behind single and batch requests when it is a stream's chunk: :class:`PriorityGate`), and meters
what it issued; :class:`SharedIssuer` issues another scheme's generator under its own name. The safety rules it
enforces with the holder are listed in :mod:`app.issuing.node`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from app.errors import NotReadyError
from app.issuing.holder import IdentityHolder
from app.metrics import SchemeMetrics
from app.schemes.base import Batch, Generator, GeneratorStats, Scheme

log = logging.getLogger("idmint.node")

Charge = Callable[[int], None]
"""``charge(count)``: charges ``count`` IDs (or sequence integers) handed out to whoever asked for them, before any
is taken; raises to refuse (TooManyRequestsError, 429: over an API key's IDs/s quota; InvalidOptionError, 422: a
count larger than the quota ever grants at once). Every method that hands IDs out requires one
(:meth:`Issuer.issue`, and the sequences' :meth:`~app.sequences.SequenceService.next`,
:meth:`~app.sequences.SequenceService.reserve_range`, :meth:`~app.sequences.SequenceService.reserve`): a route
passes its request's (:func:`app.api.auth.ids_charge`), anything else :func:`no_charge`, so no path can hand IDs
out without saying whom they are charged to."""


def no_charge(count: int) -> None:
    """The :data:`Charge` of IDs handed out to no one's quota (no API keys, a public request, ``idmint mint``)."""


MIN_WAIT_S = 0.0001
STREAM_SLICE_S = 0.02
"""The longest a stream's chunk sleeps between takes from a capacity-capped generator, within half the
generator's :attr:`~app.schemes.base.Generator.lookback_ns` (so what accrues meanwhile is still usable). Waking
once per slice rather than once per tick keeps four eight-byte streams from waking the event loop ~4,000 times a
second, which single requests then queued behind."""


class Issued:
    """The batches that answered one request (several only when eight-byte had to wait for the clock)."""

    __slots__ = ("batches", "count", "scheme")

    def __init__(self, scheme: Scheme, batches: list[Batch]) -> None:
        self.scheme = scheme
        self.batches = batches
        self.count = batches[0].count if len(batches) == 1 else sum(b.count for b in batches)

    def encode(self, fmt: str) -> bytes:
        """Every ID in form ``fmt``, one per line, newline-terminated (always through the batches' own encoders,
        which pick their scalar path for small batches)."""
        if len(self.batches) == 1:
            return self.batches[0].encode(fmt)
        return b"".join(b.encode(fmt) for b in self.batches)

    def json_members(self, fmt: str) -> bytes | bytearray | memoryview | None:
        """The IDs as JSON array members (:meth:`Batch.json_members <app.schemes.base.Batch.json_members>`) when
        one batch answered and it writes them; else None."""
        return self.batches[0].json_members(fmt) if len(self.batches) == 1 else None

    def extra(self, fmt: str) -> dict[str, Any]:
        return self.batches[0].extra(fmt) if self.batches else {}

    def values(self) -> list[int]:
        return [v for b in self.batches for v in b.values()]


class PriorityGate:
    """Single and batch requests ahead of streams on one generator.

    A request that has to wait for the clock (its scheme's per-tick sequence is used up) enters the gate while it
    waits (:meth:`enter`); a stream's chunk, before each ``generate``, defers while any such request is waiting,
    so at the next tick the waiting requests take their IDs first and the streams share what is left."""

    __slots__ = ("waiting", "_clear")

    def __init__(self) -> None:
        self.waiting = 0
        self._clear: asyncio.Event | None = None

    def enter(self) -> None:
        self.waiting += 1

    def leave(self) -> None:
        self.waiting -= 1
        if not self.waiting and self._clear is not None:
            self._clear.set()

    async def defer(self) -> None:
        """Return once no single or batch request is waiting on this generator."""
        while self.waiting:
            if self._clear is None or self._clear.is_set():
                self._clear = asyncio.Event()
            await self._clear.wait()


class StatsMeter:
    """Meters a generator's :class:`~app.schemes.base.GeneratorStats` on the metrics of the scheme ``name`` that
    owns the generator: once per event however many schemes issue from it (a shared issuer uses its base's meter).
    A new generator's stats count from zero."""

    __slots__ = ("metrics", "name", "of", "_seen")

    def __init__(self, name: str, metrics: SchemeMetrics) -> None:
        self.name = name
        self.metrics = metrics
        self.of: GeneratorStats | None = None
        """The stats metered (the generator's); a meter reads nothing from the same stats showing no event yet."""
        self._seen = (0, 0, 0)

    def account(self, stats: GeneratorStats) -> None:
        """Meter what ``stats`` (the generator's) counted since the last call."""
        if stats is not self.of:
            self.of, self._seen = stats, (0, 0, 0)
        seen = (stats.clock_rollbacks, stats.max_rollback_ns, stats.sequence_exhausted)
        last = self._seen
        if seen != last:
            if seen[0] > last[0]:
                log.warning("%s: clock rollback seen (largest step %.6f s)", self.name, stats.max_rollback_ns / 1e9)
            self.metrics.generator_stats(seen[0] - last[0], seen[1], seen[2] - last[2])
            self._seen = seen


class Issuer:
    """Issues one scheme's IDs for this node from the generator of the :class:`~app.issuing.holder.IdentityHolder` it is
    given (``holder``): asks it whether the scheme may issue now, issues (waiting for the clock when a scheme's
    per-tick sequence runs out), and meters what it issued on its scheme's :class:`~app.metrics.SchemeMetrics`."""

    def __init__(self, scheme: Scheme, holder: IdentityHolder, metrics: SchemeMetrics) -> None:
        self.scheme = scheme
        self.name = scheme.name
        self.holder = holder
        self.metrics = metrics
        """This scheme's metrics (a sharing scheme meters under its own name)."""
        self.gate = PriorityGate()
        self.stats = StatsMeter(holder.name, holder.metrics)
        """The generator's events (clock rollbacks, sequence exhausted), metered under the scheme that owns it."""

    @property
    def generator(self) -> Generator | None:
        """The generator IDs are issued from, or None while no valid identity is held."""
        return self.holder.generator

    # -- hot path ------------------------------------------------------------------------------------------
    def check(self) -> Generator:
        """The generator to issue from now; raises NotReadyError when the scheme may not issue
        (:meth:`IdentityHolder.check <app.issuing.holder.IdentityHolder.check>`, the one owner of that rule)."""
        return self.holder.check()

    def _holders_generator(self, gen: Generator) -> Generator | None:
        """The holder's generator ``gen`` issues from (None when the holder has moved on to another)."""
        return gen

    async def _wait_for_clock(self, gen: Generator, stream: bool = False) -> float:
        """Sleep until ``gen`` can issue again; returns the seconds slept. How long a request may wait for the
        clock, and what a longer wait means (a clock stepped back), the holder decides
        (:meth:`IdentityHolder.clock_wait <app.issuing.holder.IdentityHolder.clock_wait>`: NotReadyError, or 0 s when a
        fresh generator serves at once). A stream's chunk (``stream``) sleeps at least a slice of the generator's
        lookback (:data:`STREAM_SLICE_S`)."""
        holder = self.holder
        wait = holder.clock_wait(self._holders_generator(gen), max(gen.wait_ns() / 1e9, MIN_WAIT_S), self.name)
        if not wait:
            return 0.0
        if stream:  # a slice of the lookback, never past max_clock_wait
            wait = max(wait, min(STREAM_SLICE_S, gen.lookback_ns / 2e9, holder.max_clock_wait))
        await asyncio.sleep(wait)
        return wait

    async def issue(self, count: int, options: dict[str, Any], *, charge: Charge, stream: bool = False) -> Issued:
        """Issue ``count`` IDs, charged first (``charge(count)``, before anything is generated: :data:`Charge`).
        Raises what ``charge`` raises, NotReadyError (fail closed, a clock wait over max_clock_wait, a mark that
        cannot be recorded) or InvalidOptionError.

        ``stream=True`` marks a stream's chunk: it yields the generator to single and batch requests waiting for the
        same clock tick (:class:`PriorityGate`), so a capacity-capped scheme serves them first."""
        charge(count)
        gate = self.gate
        if stream and gate.waiting:
            await gate.defer()
        issued = self._generate(count, options, stream)
        return issued if isinstance(issued, Issued) else await issued

    def issue_now(self, count: int, options: dict[str, Any], *, charge: Charge) -> Issued | Coroutine[Any, Any, Issued]:
        """:meth:`issue` (not a stream's chunk) without a coroutine when it need not wait: the :class:`Issued`
        when the whole count was generated within the recorded high-water mark, else the coroutine that waits for
        the clock or records the mark (IDs already generated are part of its answer). Raises as :meth:`issue`."""
        charge(count)
        return self._generate(count, options, False)

    def _generate(self, count: int, options: dict[str, Any], stream: bool) -> Issued | Coroutine[Any, Any, Issued]:
        """Generate ``count`` IDs once charged: the :class:`Issued` when the generator's first batch holds them all
        within the recorded high-water mark, else :meth:`_issue_rest`'s coroutine."""
        gen = self.check()
        batch = gen.generate(count, **options)
        if batch.count == count and batch.high_water <= self.holder.recorded_mark:
            self.metrics.ids_issued(count)
            stats = gen.stats
            meter = self.stats
            if stats is not meter.of or stats.sequence_exhausted or stats.clock_rollbacks:  # else nothing to meter
                meter.account(stats)
            return Issued(self.scheme, [batch])
        return self._issue_rest(gen, batch, count, options, stream)

    async def _issue_rest(
        self, gen: Generator, batch: Batch, count: int, options: dict[str, Any], stream: bool
    ) -> Issued:
        """The rest of :meth:`issue` once ``batch`` (``gen``'s first) fell short of ``count`` or passed the recorded
        mark: wait for the clock and generate the rest, record the mark, account."""
        holder = self.holder
        gate = self.gate
        batches = [batch] if batch.count else []
        remaining = count - batch.count
        waited = 0.0
        if not stream:
            gate.enter()
        try:
            while remaining:
                waited += await self._wait_for_clock(gen, stream)
                if stream and gate.waiting:
                    await gate.defer()
                current = self.check()
                if current is not gen and holder.pool is not None:
                    # Re-claimed while waiting: one answer's mark covers one identity's IDs. (A fresh unclaimed
                    # generator, as wiji's after its clock stepped back, just carries on.)
                    raise NotReadyError(
                        f"{self.name}: this node claimed another identity while the request waited for the clock; "
                        "retry",
                        1,
                    )
                gen = current
                batch = gen.generate(remaining, **options)
                if batch.count:
                    batches.append(batch)
                    remaining -= batch.count
        finally:
            if not stream:
                gate.leave()
        high = max(b.high_water for b in batches)
        if high > holder.recorded_mark:
            await holder.record_mark(high)
        self.check()
        self._account(gen, count, waited)
        return Issued(self.scheme, batches)

    def capacity_per_second(self) -> float | None:
        """The most IDs per second this issuer's generator can issue (its scheme's cap times the identities held),
        or None when the clock does not bound it. Read from the generator's ``capacity_per_second``."""
        gen = self.generator
        return None if gen is None else getattr(gen, "capacity_per_second", None)

    def _account(self, gen: Generator, count: int, waited: float) -> None:
        metrics = self.metrics
        metrics.ids_issued(count)
        self.stats.account(gen.stats)
        if waited:
            metrics.issue_wait(waited)

    def describe(self) -> dict[str, Any]:
        holder = self.holder
        out: dict[str, Any] = {"ready": True}
        try:
            self.check()
        except NotReadyError as exc:  # no identity, a storage fault, a long wait for an inherited mark...
            out["ready"] = False
            out["reason"] = exc.reason.removeprefix(f"{holder.name}: ")
        if holder.pool is not None:
            out["kind"] = holder.pool.kind
            out["identities"] = [c.identity for c in holder.claims]
            out["high_water_mark"] = holder.recorded_mark
        return out


class SharedIssuer(Issuer):
    """The issuer of a scheme that issues through another scheme's issuer (:attr:`Scheme.shares_generator_with`):
    given the base issuer's identity holder (claims, marks, generator) and stats meter, it wraps the base generator with
    :meth:`Scheme.share_generator` (so its batches carry the scheme's own text, e.g. TypeID's prefix) and meters
    under its own name. The base issuer's holder does all claiming; its background task is the only one."""

    def __init__(self, base: Issuer, scheme: Scheme, metrics: SchemeMetrics) -> None:
        super().__init__(scheme, base.holder, metrics)
        self.base = base
        self.gate = base.gate  # one generator, one queue: streams of either scheme defer to requests of both
        self.stats = base.stats  # one generator, its events metered once
        self._base_generator: Generator | None = None
        self._own_generator: Generator | None = None

    @property
    def generator(self) -> Generator | None:
        gen = self.holder.generator
        if gen is None:
            return None
        if gen is not self._base_generator:
            self._base_generator, self._own_generator = gen, self.scheme.share_generator(gen)
        return self._own_generator

    def _holders_generator(self, gen: Generator) -> Generator | None:
        return self._base_generator if gen is self._own_generator else None

    def check(self) -> Generator:
        super().check()
        gen = self.generator
        assert gen is not None
        return gen

    def describe(self) -> dict[str, Any]:
        out = self.base.describe()
        out["shares_generator_with"] = self.base.name
        return out
