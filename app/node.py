"""The node: one :class:`Issuer` per scheme, each holding a generator and the claimed identity behind it.

Safety rules enforced here, above any lease backend:

* **Fail closed.** Every issue checks that each claim is still valid (not lost, and ``time.monotonic()`` before
  the claim's deadline); otherwise it raises :class:`~app.errors.NotReadyError` (HTTP 503 + Retry-After) and the
  background task re-claims, possibly a different identity.
* **High-water marks are reservations.** Before IDs leave the process, the claim's recorded mark must be at or
  above every timestamp issued. The background task keeps the mark ``backend.mark_horizon`` seconds ahead of the
  clock, so the hot path normally finds it already high enough; when not, the issue awaits a new record first.
  After a crash the next holder starts above the mark; a clean stop records the exact final mark.
* **Clock behind a mark.** A claimed identity whose mark is ahead of our clock by more than
  ``settings.max_clock_wait`` is refused (released, excluded, logged, counted) and another is claimed; a smaller
  gap is waited out by the generator (or, for HLC-ULID and Muid, carried by their logical clock). While that wait
  is longer than ``INHERITED_WAIT_READY_S``, the scheme is not ready (503 + Retry-After) rather than hanging.
* **Bounded clock waits.** No request sleeps on the clock for longer than ``settings.max_clock_wait`` at a time:
  past it the answer is 503 + Retry-After, and when the issuer holds a claimed identity (the clock was stepped
  back further than that while running), the identity is refused and another claimed, as at start-up.
* **Storage faults.** A high-water mark that cannot be recorded (disk full, read-only state directory, etcd
  refusing) makes the scheme not ready, naming why, until a retry succeeds; the background task survives any
  exception, retrying with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from app import __version__
from app.errors import NotReadyError
from app.lease.base import Claim, Holder, LeaseBackend, PoolSpec
from app.metrics import Metrics, SchemeMetrics
from app.schemes import schemes
from app.schemes.base import Batch, Clock, Generator, Scheme
from app.settings import Settings

log = logging.getLogger("idmint.node")

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0
FAULT_RETRY_MAX_S = 2.0
"""Longest pause between retries of a failed high-water-mark record (the disk may recover at any moment)."""
MIN_WAIT_S = 0.0001
INHERITED_WAIT_READY_S = 1.0
"""A scheme whose generator must wait longer than this for the clock to pass an inherited mark is not ready."""

GeneratorFactory = Callable[[list[int], int], Generator]
"""(claimed identities, floor in native units) -> generator."""


NO_MARK_NEEDED = 1 << 128
"""The "recorded mark" of a scheme without a claimed identity (Wiji): its IDs never wait for a record."""

class Issued:
    """The batches that answered one request (several only when eight-byte had to wait for the clock)."""

    __slots__ = ("batches", "count", "scheme")

    def __init__(self, scheme: Scheme, batches: list[Batch]) -> None:
        self.scheme = scheme
        self.batches = batches
        self.count = sum(b.count for b in batches)

    def encode(self, fmt: str) -> bytes:
        """Every ID in form ``fmt``, one per line, newline-terminated (always through the batches' own encoders,
        which pick their scalar path for small batches)."""
        if len(self.batches) == 1:
            return self.batches[0].encode(fmt)
        return b"".join(b.encode(fmt) for b in self.batches)

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


class Issuer:
    """Issues one scheme's IDs for this node; owns the claim(s) and the generator built on them."""

    def __init__(
        self,
        node: Node,
        scheme: Scheme,
        factory: GeneratorFactory,
        pool: PoolSpec | None,
        claims_wanted: int = 1,
    ) -> None:
        self.node = node
        self.scheme = scheme
        self.name = scheme.name
        self.factory = factory
        self.pool = pool
        self.claims_wanted = claims_wanted
        self.generator: Generator | None = None
        self.claims: list[Claim] = []
        self.recorded_mark = -1
        self.reason = "starting: no identity claimed yet"
        self.retry_after = 1
        self.excluded: set[int] = set()
        self._mark_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._stats_seen = (0, 0, 0)
        self._was_ready = False
        self.fault: str | None = None
        """Why the last high-water-mark record failed (the scheme is not ready until one succeeds), else None."""
        self._ready_at_ns = 0
        """Clock reading (ns) before which the generator must wait for an inherited mark; 0 = none."""
        self.gate = PriorityGate()
        self.metrics: SchemeMetrics = node.metrics.scheme(self.name)
        """This scheme's metrics (a sharing scheme meters under its own name)."""

    # -- hot path ------------------------------------------------------------------------------------------
    def check(self) -> Generator:
        """The generator, if every claim behind it is still valid, its mark can be recorded and it need not wait
        long for an inherited mark; else raise NotReadyError."""
        gen = self.generator
        if gen is None:
            raise NotReadyError(f"{self.name}: {self.reason}", self.retry_after)
        if self.fault is not None:
            raise NotReadyError(f"{self.name}: {self.fault}", self.retry_after)
        if self._ready_at_ns:
            self._check_inherited_wait()
        if self.claims:
            self._check_claims()
        return gen

    def _check_claims(self) -> None:
        """Raise NotReadyError (dropping the claims) when any claim is lost or past its deadline."""
        if self.claims:
            now = time.monotonic()
            for claim in self.claims:
                if claim.lost or now >= claim.deadline:
                    why = "lease lost" if claim.lost else "lease deadline passed (refresh not confirmed in time)"
                    self._drop(f"{why} for {self.pool.kind if self.pool else 'identity'} "
                               f"{claim.identity}")
                    raise NotReadyError(f"{self.name}: {self.reason}", self.retry_after)

    def _check_inherited_wait(self) -> None:
        left_s = (self._ready_at_ns - self.node.clock()) / 1e9
        if left_s <= INHERITED_WAIT_READY_S:
            self._ready_at_ns = 0
            return
        raise NotReadyError(f"{self.name}: waiting {left_s:.1f} s for the clock to pass the high-water mark "
                            f"inherited with {self._identity_words()}", math.ceil(left_s))

    def _identity_words(self) -> str:
        kind = self.pool.kind if self.pool is not None else "identity"
        return f"{kind} {', '.join(str(c.identity) for c in self.claims)}"

    async def _wait_for_clock(self, gen: Generator) -> float:
        """Sleep until ``gen`` can issue again; returns the seconds slept. A wait longer than max_clock_wait is not
        slept: it raises NotReadyError, after refusing the claimed identity (the clock was stepped back)."""
        wait = max(gen.wait_ns() / 1e9, MIN_WAIT_S)
        limit = self.node.settings.max_clock_wait
        if wait > limit:
            retry = math.ceil(min(wait, BACKOFF_MAX_S))
            if self.claims and self.generator is gen:
                self._refuse_running(wait, limit)
            elif self.pool is None and not self.claims and self.generator is gen:
                self._renew_unclaimed(wait, limit)  # nothing to claim: a fresh generator serves at once
                return 0.0
            raise NotReadyError(f"{self.name}: the clock is {wait:.3f} s behind the last timestamp issued "
                                f"(limit IDMINT_MAX_CLOCK_WAIT {limit:g} s)", retry)
        await asyncio.sleep(wait)
        return wait

    def _renew_unclaimed(self, wait: float, limit: float) -> None:
        """The clock stepped back more than max_clock_wait under a generator that claims nothing (Wiji: its
        identity is its random part): start a fresh one, as a new process would, and publish it."""
        log.warning("%s: the clock stepped back %.3f s behind the last timestamp issued (limit %g s); starting a "
                    "fresh generator", self.name, wait, limit)
        self.metrics.identity_refused("clock_stepped_back")
        gen = self.generator = self.factory([], -1)
        published = self.scheme.registration(gen)
        if published:
            asyncio.get_running_loop().create_task(self.node.register(self, published))

    def _refuse_running(self, wait: float, limit: float) -> None:
        """The clock stepped back more than max_clock_wait under the running generator: give the identity up
        (its exact final mark recorded) and let the background task claim another, as at start-up."""
        gen, claims = self.generator, list(self.claims)
        words = self._identity_words()
        log.warning("%s: refused %s: the clock stepped back %.3f s behind its last timestamp (limit %g s); "
                    "claiming another", self.name, words, wait, limit)
        for _claim in claims:
            self.metrics.identity_refused("clock_stepped_back")
        if self.pool is not None and not self.pool.static:
            self.excluded.update(c.identity for c in claims)
        final = gen.high_water if gen is not None else None
        self.generator, self.claims = None, []
        self.reason = f"refused {words}: the clock stepped back {wait:.3f} s (limit {limit:g} s)"
        self.retry_after = 1
        for claim in claims:
            asyncio.get_running_loop().create_task(self._release_quietly(claim, final))
        self.metrics.lease_held(False, None)
        self._wake.set()

    async def issue(self, count: int, options: dict[str, Any], stream: bool = False) -> Issued:
        """Issue ``count`` IDs. Raises NotReadyError (fail closed, a clock wait over max_clock_wait, a mark that
        cannot be recorded) or InvalidOptionError.

        ``stream=True`` marks a stream's chunk: it yields the generator to single and batch requests waiting for the
        same clock tick (:class:`PriorityGate`), so a capacity-capped scheme serves them first."""
        gate = self.gate
        if stream and gate.waiting:
            await gate.defer()
        gen = self.check()
        batch = gen.generate(count, **options)
        if batch.count == count and batch.high_water <= self.recorded_mark:
            self._account(gen, batch.count, 0.0)
            return Issued(self.scheme, [batch])
        batches = [batch] if batch.count else []
        remaining = count - batch.count
        waited = 0.0
        if not stream:
            gate.enter()
        try:
            while remaining:
                waited += await self._wait_for_clock(gen)
                if stream and gate.waiting:
                    await gate.defer()
                gen = self.check()
                batch = gen.generate(remaining, **options)
                if batch.count:
                    batches.append(batch)
                    remaining -= batch.count
        finally:
            if not stream:
                gate.leave()
        high = max(b.high_water for b in batches)
        if high > self.recorded_mark:
            await self.record_mark(high)
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
        st = gen.stats
        seen = (st.clock_rollbacks, st.max_rollback_ns, st.sequence_exhausted)
        if seen != self._stats_seen:
            last = self._stats_seen
            if seen[0] > last[0]:
                log.warning("%s: clock rollback seen (largest step %.6f s)", self.name, st.max_rollback_ns / 1e9)
            metrics.generator_stats(seen[0] - last[0], seen[1], seen[2] - last[2])
            self._stats_seen = seen
        if waited:
            metrics.issue_wait(waited)

    # -- high-water marks ----------------------------------------------------------------------------------
    async def record_mark(self, at_least: int = -1) -> None:
        """Record a mark ``mark_horizon`` seconds ahead of the clock (and at or above ``at_least``)."""
        async with self._mark_lock:
            node = self.node
            horizon = self.scheme.native_from_ns(node.clock() + int(node.backend.mark_horizon * 1e9))
            target = max(at_least, horizon)
            if target <= self.recorded_mark or not self.claims:
                return
            try:
                for claim in list(self.claims):
                    await claim.record_mark(target)
            except NotReadyError as exc:
                self._fault(exc.reason)
                raise
            except OSError as exc:  # a backend that let one through: the same fault
                self._fault(f"recording the high-water mark failed: {exc}")
                raise NotReadyError(f"{self.name}: {self.fault}", self.retry_after) from exc
            if self.fault is not None:
                log.warning("%s: high-water mark recorded again; issuing", self.name)
                self.fault = None
            self.recorded_mark = target
            self.metrics.high_water_mark(target * self.scheme.native_unit_ns / 1e9)

    def _fault(self, reason: str) -> None:
        if self.fault is None:
            log.error("%s: stopped issuing: %s", self.name, reason)
        self.fault = reason
        self.retry_after = 2

    # -- claiming ------------------------------------------------------------------------------------------
    def _drop(self, reason: str) -> None:
        if self.generator is not None:
            log.error("%s: stopped issuing: %s", self.name, reason)
        self.generator = None
        self.reason = reason
        self.retry_after = 1
        claims, self.claims = self.claims, []
        for claim in claims:
            asyncio.get_running_loop().create_task(self._release_quietly(claim, None))
        self.metrics.lease_held(False, None)
        self._was_ready = False
        self._wake.set()

    async def _release_quietly(self, claim: Claim, final_mark: int | None) -> None:
        try:
            await self.node.backend.release(claim, final_mark)
        except Exception as exc:  # noqa: BLE001 -- release is best effort; the lease expires anyway
            log.warning("%s: releasing %s failed: %s", self.name, claim.key, exc)

    async def acquire(self) -> None:
        """Claim identities and build the generator. Raises NotReadyError when it cannot."""
        node = self.node
        if self.pool is None:
            self.generator = self.factory([], -1)
            self.recorded_mark = NO_MARK_NEEDED
            self.reason = ""
            self.metrics.lease_held(True, None)
            return
        while True:
            claims: list[Claim] = []
            try:
                for _ in range(self.claims_wanted):
                    pool = replace(self.pool, exclude=frozenset(self.excluded | {c.identity for c in claims}))
                    claims.append(await node.backend.claim(pool, node.holder))
            except BaseException:
                for claim in claims:
                    await self._release_quietly(claim, None)
                raise
            floor = max(c.high_water_mark for c in claims)
            now_native = self.scheme.native_from_ns(node.clock())
            ahead_s = (floor - now_native) * self.scheme.native_unit_ns / 1e9
            if ahead_s > node.settings.max_clock_wait:
                refused = [c for c in claims if (c.high_water_mark - now_native) * self.scheme.native_unit_ns / 1e9
                           > node.settings.max_clock_wait]
                for claim in claims:
                    await self._release_quietly(claim, None)
                ids = ", ".join(str(c.identity) for c in refused)
                log.warning("%s: refused %s %s: its high-water mark is %.3f s ahead of this node's clock "
                            "(limit %g s)", self.name, self.pool.kind, ids, ahead_s, node.settings.max_clock_wait)
                for _claim in refused:
                    self.metrics.identity_refused("high_water_mark_ahead")
                if self.pool.static:
                    raise NotReadyError(
                        f"static {self.pool.kind} {ids} has a high-water mark {ahead_s:.3f} s ahead of this "
                        f"node's clock (limit {node.settings.max_clock_wait:g} s)", retry_after=5)
                self.excluded.update(c.identity for c in refused)
                continue
            self.claims = claims
            self.recorded_mark = floor
            try:
                await self.record_mark(floor)
            except BaseException:
                self.claims = []
                for claim in claims:
                    await self._release_quietly(claim, None)
                raise
            self._ready_at_ns = self._inherited_wait_until([c.identity for c in claims], floor)
            self.generator = self.factory([c.identity for c in claims], floor)
            self.fault = None
            self._stats_seen = (0, 0, 0)
            self.reason = ""
            held = [c.identity for c in claims]
            log.info("%s: claimed %s %s (high-water mark %d); issuing", self.name, self.pool.kind,
                     ", ".join(map(str, held)), floor)
            for identity in held:
                self.metrics.lease_held(True, identity)
            return

    def _inherited_wait_until(self, identities: list[int], floor: int) -> int:
        """The clock reading (ns) until which a generator on ``floor`` must wait before it can issue (0 = none).

        Asked of a throwaway generator (its ID is never used): logical-clock schemes (Muid, HLC-ULID) issue at
        once, the others report how long they must wait."""
        probe = self.factory(identities, floor)
        if probe.generate(1).count:
            return 0
        wait_ns = probe.wait_ns()
        return self.node.clock() + wait_ns if wait_ns > INHERITED_WAIT_READY_S * 1e9 else 0

    async def run(self) -> None:
        """Background task: claim (with backoff), keep the mark ahead of the clock, re-claim after a loss.

        Survives any exception: each is logged once per distinct reason and retried with backoff (a failed mark
        record at most every FAULT_RETRY_MAX_S, so issuing resumes soon after the disk recovers)."""
        backoff = BACKOFF_START_S
        last_reason: str | None = None
        interval = self.node.backend.mark_interval
        while True:
            try:
                if self.generator is None:
                    await self.acquire()
                elif self.claims:
                    self._check_claims()
                    await self.record_mark()
                backoff = BACKOFF_START_S
                last_reason = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 -- the task must outlive any fault; each is logged
                if isinstance(exc, NotReadyError):
                    reason = exc.reason
                    if self.generator is None:
                        self.reason, self.retry_after = exc.reason, exc.retry_after
                else:
                    reason = f"internal error: {exc!r}"
                    if self.generator is None:
                        self.reason, self.retry_after = reason, 2
                    if reason != last_reason:
                        log.exception("%s: background task: %s", self.name, reason)
                if reason != last_reason:
                    if reason != self.fault:  # a mark fault was logged where it happened
                        log.warning("%s: not ready: %s", self.name, reason)
                    last_reason = reason
                pause = min(backoff, FAULT_RETRY_MAX_S) if self.fault is not None else backoff
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=pause)
                except TimeoutError:
                    pass
                continue
            self._wake.clear()
            deadline = min((c.deadline for c in self.claims), default=math.inf)
            sleep = min(interval, max(deadline - time.monotonic(), 0.01))
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=sleep)
            except TimeoutError:
                pass

    async def stop(self) -> None:
        """Record the exact final mark and release every claim."""
        gen, claims = self.generator, self.claims
        self.generator, self.claims = None, []
        self.reason = "stopping"
        final = gen.high_water if gen is not None else None
        for claim in claims:
            valid = claim.valid()
            await self._release_quietly(claim, final if valid else None)
        self.metrics.lease_held(False, None)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ready": True}
        try:
            self.check()
        except NotReadyError as exc:  # no identity, a storage fault, a long wait for an inherited mark...
            out["ready"] = False
            out["reason"] = exc.reason.removeprefix(f"{self.name}: ")
        if self.pool is not None:
            out["kind"] = self.pool.kind
            out["identities"] = [c.identity for c in self.claims]
            out["high_water_mark"] = self.recorded_mark
        return out


class SharedIssuer(Issuer):
    """The issuer of a scheme that issues through another scheme's issuer (:attr:`Scheme.shares_generator_with`):
    the base issuer holds the claims, marks and generator; this one wraps the base generator with
    :meth:`Scheme.share_generator` (so its batches carry the scheme's own text, e.g. TypeID's prefix) and meters
    under its own name. It claims nothing and runs no background task of its own."""

    def __init__(self, base: Issuer, scheme: Scheme) -> None:
        super().__init__(base.node, scheme, base.factory, None)
        self.base = base
        self.gate = base.gate  # one generator, one queue: streams of either scheme defer to requests of both
        self._base_generator: Generator | None = None
        self._own_generator: Generator | None = None

    @property
    def generator(self) -> Generator | None:
        gen = self.base.generator
        if gen is None:
            return None
        if gen is not self._base_generator:
            self._base_generator, self._own_generator = gen, self.scheme.share_generator(gen)
        return self._own_generator

    @generator.setter
    def generator(self, value: Generator | None) -> None:
        pass  # set by the base issuer only

    @property
    def recorded_mark(self) -> int:
        return self.base.recorded_mark

    @recorded_mark.setter
    def recorded_mark(self, value: int) -> None:
        pass

    @property
    def claims(self) -> list[Claim]:
        return self.base.claims

    @claims.setter
    def claims(self, value: list[Claim]) -> None:
        pass

    def check(self) -> Generator:
        self.base.check()
        gen = self.generator
        assert gen is not None
        return gen

    async def record_mark(self, at_least: int = -1) -> None:
        await self.base.record_mark(at_least)

    def _refuse_running(self, wait: float, limit: float) -> None:
        self.base._refuse_running(wait, limit)

    def _renew_unclaimed(self, wait: float, limit: float) -> None:
        self.base._renew_unclaimed(wait, limit)

    async def acquire(self) -> None:
        """Nothing to claim: the base issuer does."""
        if self.base.generator is None:
            raise NotReadyError(f"{self.name}: {self.base.reason}", self.base.retry_after)

    async def run(self) -> None:
        """No background work: the base issuer's task keeps the claims and marks."""

    async def stop(self) -> None:
        """Nothing to release: the base issuer does."""

    def describe(self) -> dict[str, Any]:
        out = self.base.describe()
        out["shares_generator_with"] = self.base.name
        return out


class Node:
    """All issuers of this process, the lease backend behind them, and the clock they share."""

    def __init__(self, settings: Settings, backend: LeaseBackend, metrics: Metrics,
                 clock: Clock | None = None, only: list[str] | None = None) -> None:
        self.settings = settings
        self.backend = backend
        self.metrics = metrics
        if clock is None:
            offset_ns = settings.clock_offset_ms * 1_000_000
            clock = time.time_ns if not offset_ns else (lambda: time.time_ns() + offset_ns)
        self.clock: Clock = clock
        self.holder = Holder(
            host=socket.gethostname(), pid=os.getpid(), version=__version__,
            started_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            address=f"{settings.host}:{settings.port}",
        )
        self.schemes: dict[str, Scheme] = {name: s.configured(settings) for name, s in schemes().items()}
        """Every registered scheme as this node uses it (:meth:`Scheme.configured`): decoding and /v1/schemes
        read these."""
        self.issuers: dict[str, Issuer] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._build_issuers()
        if only is not None:
            self.issuers = {name: issuer for name, issuer in self.issuers.items() if name in only}

    def _build_issuers(self) -> None:
        """One issuer per registered scheme, from what the scheme declares: its identity plan (-> pool), its
        generator factory, or the scheme whose issuer it shares."""
        settings, clock = self.settings, self.clock
        for name, scheme in self.schemes.items():
            if scheme.shares_generator_with is not None:
                continue
            plan = scheme.identity_plan(settings)
            pool = None if plan is None else PoolSpec.from_plan(name, plan)

            def factory(ids: list[int], floor: int, scheme: Scheme = scheme) -> Generator:
                return scheme.new_generator(settings, ids, floor, clock)

            self.issuers[name] = Issuer(self, scheme, factory, pool, claims_wanted=plan.claims if plan else 1)
        for name, scheme in self.schemes.items():
            base = scheme.shares_generator_with
            if base is not None:
                if base not in self.issuers:
                    raise ValueError(f"{name} shares the generator of {base!r}, which has no issuer of its own")
                self.issuers[name] = SharedIssuer(self.issuers[base], scheme)

    async def start(self) -> None:
        """Start the backend and the issuers' background tasks; first claims are attempted before returning."""
        await self.backend.start()
        if self.backend.name == "embedded":  # file locks never expire; the etcd backend reports its own
            self.metrics.lease_deadline(math.inf)
        for issuer in self.issuers.values():
            try:
                await issuer.acquire()
            except NotReadyError as exc:
                issuer.reason, issuer.retry_after = exc.reason, exc.retry_after
                log.warning("%s: not ready: %s", issuer.name, exc.reason)
            self._tasks.append(asyncio.create_task(issuer.run(), name=f"idmint-issuer-{issuer.name}"))
        for issuer in self.issuers.values():
            published = issuer.generator and issuer.scheme.registration(issuer.generator)
            if published:
                await self.register(issuer, published)

    async def register(self, issuer: Issuer, published: str) -> None:
        """Publish what ``issuer``'s generator registers (Wiji's random part); a failure is logged, not raised."""
        try:
            await self.backend.register(issuer.name, published, {"holder": self.holder.as_dict()})
        except NotReadyError as exc:
            log.warning("%s: registering %s failed: %s", issuer.name, published, exc.reason)

    async def stop(self) -> None:
        """Cancel background tasks, record final marks, release claims, close the backend."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for issuer in self.issuers.values():
            await issuer.stop()
        await self.backend.close()

    def issuer(self, name: str) -> Issuer:
        """The issuer of scheme ``name``; raises UnknownSchemeError naming the known schemes."""
        try:
            return self.issuers[name]
        except KeyError:
            from app.schemes import get_scheme

            get_scheme(name)  # raises UnknownSchemeError with the list of known schemes
            raise

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, per-scheme state): ready only when every scheme can issue right now."""
        detail: dict[str, dict[str, Any]] = {}
        ready = True
        for name, issuer in self.issuers.items():
            try:
                issuer.check()
                detail[name] = {"ready": True}
            except NotReadyError as exc:
                ready = False
                detail[name] = {"ready": False, "reason": exc.reason}
        return ready, detail
