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
  gap is waited out by the generator (or, for HLC-ULID and Muid, carried by their logical clock).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable

from app import __version__
from app.errors import NotReadyError
from app.lease.base import Claim, Holder, LeaseBackend, PoolSpec
from app.metrics import Metrics
from app.schemes import schemes
from app.schemes.base import Batch, Clock, Generator, Scheme
from app.settings import Settings

log = logging.getLogger("idmint.node")

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0
MIN_WAIT_S = 0.0001

GeneratorFactory = Callable[[list[int], int], Generator]
"""(claimed identities, floor in native units) -> generator."""


NO_MARK_NEEDED = 1 << 128
"""The "recorded mark" of a scheme without a claimed identity (Wiji): its IDs never wait for a record."""

SMALL_BATCH = 8
"""Up to this many IDs, per-ID scalar formatting beats the column-wise numpy encoders' fixed cost."""


class Issued:
    """The batches that answered one request (several only when eight-byte had to wait for the clock)."""

    __slots__ = ("batches", "count", "scheme")

    def __init__(self, scheme: Scheme, batches: list[Batch]) -> None:
        self.scheme = scheme
        self.batches = batches
        self.count = sum(b.count for b in batches)

    def encode(self, fmt: str) -> bytes:
        """Every ID in form ``fmt``, one per line, newline-terminated."""
        if self.count <= SMALL_BATCH:
            text = self.scheme.format
            return "".join([text(v, fmt) + "\n" for b in self.batches for v in b.values()]).encode("ascii")
        if len(self.batches) == 1:
            return self.batches[0].encode(fmt)
        return b"".join(b.encode(fmt) for b in self.batches)

    def extra(self, fmt: str) -> dict[str, Any]:
        return self.batches[0].extra(fmt) if self.batches else {}

    def values(self) -> list[int]:
        return [v for b in self.batches for v in b.values()]


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

    # -- hot path ------------------------------------------------------------------------------------------
    def check(self) -> Generator:
        """The generator, if every claim behind it is still valid; else raise NotReadyError."""
        gen = self.generator
        if gen is None:
            raise NotReadyError(f"{self.name}: {self.reason}", self.retry_after)
        if self.claims:
            now = time.monotonic()
            for claim in self.claims:
                if claim.lost or now >= claim.deadline:
                    why = "lease lost" if claim.lost else "lease deadline passed (refresh not confirmed in time)"
                    self._drop(f"{why} for {self.scheme.identity.kind if self.scheme.identity else 'identity'} "
                               f"{claim.identity}")
                    raise NotReadyError(f"{self.name}: {self.reason}", self.retry_after)
        return gen

    async def issue(self, count: int, options: dict[str, Any]) -> Issued:
        """Issue ``count`` IDs. Raises NotReadyError (fail closed) or InvalidOptionError."""
        gen = self.check()
        batch = gen.generate(count, **options)
        if batch.count == count and batch.high_water <= self.recorded_mark:
            self._account(gen, batch.count, 0.0)
            return Issued(self.scheme, [batch])
        batches = [batch] if batch.count else []
        remaining = count - batch.count
        waited = 0.0
        while remaining:
            wait = max(gen.wait_ns() / 1e9, MIN_WAIT_S)
            waited += wait
            await asyncio.sleep(wait)
            gen = self.check()
            batch = gen.generate(remaining, **options)
            if batch.count:
                batches.append(batch)
                remaining -= batch.count
        high = max(b.high_water for b in batches)
        if high > self.recorded_mark:
            await self.record_mark(high)
        self.check()
        self._account(gen, count, waited)
        return Issued(self.scheme, batches)

    def _account(self, gen: Generator, count: int, waited: float) -> None:
        metrics = self.node.metrics
        metrics.ids_issued(self.name, count)
        st = gen.stats
        seen = (st.clock_rollbacks, st.max_rollback_ns, st.sequence_exhausted)
        if seen != self._stats_seen:
            last = self._stats_seen
            if seen[0] > last[0]:
                log.warning("%s: clock rollback seen (largest step %.6f s)", self.name, st.max_rollback_ns / 1e9)
            metrics.generator_stats(self.name, seen[0] - last[0], seen[1], seen[2] - last[2])
            self._stats_seen = seen
        if waited:
            metrics.issue_wait(self.name, waited)

    # -- high-water marks ----------------------------------------------------------------------------------
    async def record_mark(self, at_least: int = -1) -> None:
        """Record a mark ``mark_horizon`` seconds ahead of the clock (and at or above ``at_least``)."""
        async with self._mark_lock:
            node = self.node
            horizon = self.scheme.native_from_ns(node.clock() + int(node.backend.mark_horizon * 1e9))
            target = max(at_least, horizon)
            if target <= self.recorded_mark or not self.claims:
                return
            for claim in list(self.claims):
                await claim.record_mark(target)
            self.recorded_mark = target
            node.metrics.high_water_mark(self.name, target * self.scheme.native_unit_ns / 1e9)

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
        self.node.metrics.lease_held(self.name, False, None)
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
            node.metrics.lease_held(self.name, True, None)
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
                for claim in refused:
                    node.metrics.identity_refused(self.name, "high_water_mark_ahead")
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
            self.generator = self.factory([c.identity for c in claims], floor)
            self._stats_seen = (0, 0, 0)
            self.reason = ""
            ids = [c.identity for c in claims]
            log.info("%s: claimed %s %s (high-water mark %d); issuing", self.name, self.pool.kind,
                     ", ".join(map(str, ids)), floor)
            for identity in ids:
                node.metrics.lease_held(self.name, True, identity)
            return

    async def run(self) -> None:
        """Background task: claim (with backoff), keep the mark ahead of the clock, re-claim after a loss."""
        backoff = BACKOFF_START_S
        last_reason = None
        interval = self.node.backend.mark_interval
        while True:
            if self.generator is None:
                try:
                    await self.acquire()
                    backoff = BACKOFF_START_S
                    last_reason = None
                except NotReadyError as exc:
                    self.reason, self.retry_after = exc.reason, exc.retry_after
                    if exc.reason != last_reason:
                        log.warning("%s: not ready: %s", self.name, exc.reason)
                        last_reason = exc.reason
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                    continue
            try:
                self.check()
                if self.claims:
                    await self.record_mark()
            except NotReadyError as exc:
                if self.generator is not None:
                    log.warning("%s: recording the high-water mark failed: %s", self.name, exc.reason)
            self._wake.clear()
            deadline = min((c.deadline for c in self.claims), default=math.inf)
            sleep = min(interval, max(deadline - time.monotonic(), 0.01))
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=sleep)
            except asyncio.TimeoutError:
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
        self.node.metrics.lease_held(self.name, False, None)

    def describe(self) -> dict[str, Any]:
        ident = self.scheme.identity
        out: dict[str, Any] = {"ready": self.generator is not None}
        if self.generator is None:
            out["reason"] = self.reason
        if ident is not None and self.pool is not None:
            out["kind"] = ident.kind
            out["identities"] = [c.identity for c in self.claims]
            out["high_water_mark"] = self.recorded_mark
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
            started_at=datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
            address=f"{settings.host}:{settings.port}",
        )
        self.issuers: dict[str, Issuer] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._build_issuers()
        if only is not None:
            self.issuers = {name: issuer for name, issuer in self.issuers.items() if name in only}

    def _build_issuers(self) -> None:
        from app.schemes.eight_byte import EightByteGenerator
        from app.schemes.hlc_ulid import HlcUlidGenerator
        from app.schemes.muid import MuidGenerator
        from app.schemes.siq import SiqGenerator, domain_hash
        from app.schemes.wiji import WijiGenerator

        s, clock = self.settings, self.clock
        by_name = schemes()

        def pool(name: str, static: int | None, group: str = "", bounds: tuple[int, int] | None = None,
                 key_prefix: str = "", key_format: str = "{:d}", allowed_groups_key: str | None = None) -> PoolSpec:
            spec = by_name[name].identity
            assert spec is not None
            lo, hi = bounds if bounds else (spec.minimum, spec.maximum)
            # etcd layout (app.lease.etcd): claims idmint/<scheme>/[<group>/]<id>, marks idmint/marks/<same rest>.
            rest = f"{name}/{group}/" if group else f"{name}/"
            return PoolSpec(scheme=name, kind=spec.kind, minimum=lo, maximum=hi, draw=spec.draw,
                            candidates=None if static is None else (static,), group=group,
                            static=static is not None, key_prefix=key_prefix or f"idmint/{rest}",
                            mark_prefix=f"idmint/marks/{rest}", key_format=key_format,
                            allowed_groups_key=allowed_groups_key)

        self.issuers["muid"] = Issuer(
            self, by_name["muid"],
            lambda ids, floor: MuidGenerator(ids[0], clock=clock, floor=floor),
            pool("muid", s.muid_medallion, key_format="{:011X}"),
        )
        self.issuers["eight-byte"] = Issuer(
            self, by_name["eight-byte"],
            lambda ids, floor: EightByteGenerator(ids, s.cluster_id, clock=clock, floor=floor,
                                                  lookback_ms=s.eight_byte_lookback_ms),
            pool("eight-byte", s.eight_byte_generator_id, str(s.cluster_id), s.eight_byte_pool_bounds,
                 key_prefix=f"pool/{s.cluster_id}:", allowed_groups_key="cluster-id"),  # java-uniqueid layout
            claims_wanted=s.eight_byte_generators,
        )
        self.issuers["hlc-ulid"] = Issuer(
            self, by_name["hlc-ulid"],
            lambda ids, floor: HlcUlidGenerator(ids[0], clock=clock, floor=floor,
                                                max_drift_ms=s.hlc_ulid_max_drift_ms),
            pool("hlc-ulid", s.hlc_ulid_publisher_id),
        )
        self.issuers["siq"] = Issuer(
            self, by_name["siq"],
            lambda ids, floor: SiqGenerator(ids[0], s.siq_domain, clock=clock, floor=floor),
            pool("siq", s.siq_shard, f"{domain_hash(s.siq_domain):08x}"),
        )
        self.issuers["wiji"] = Issuer(
            self, by_name["wiji"], lambda ids, floor: WijiGenerator(clock=clock), None,
        )

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
        wiji = self.issuers["wiji"].generator if "wiji" in self.issuers else None
        if wiji is not None:
            try:
                await self.backend.register("wiji", f"{wiji.random_part:013x}",  # type: ignore[attr-defined]
                                            {"holder": self.holder.as_dict()})
            except NotReadyError as exc:
                log.warning("wiji: registering the random part failed: %s", exc.reason)

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
        from app.schemes import get_scheme

        get_scheme(name)  # raises UnknownSchemeError with the list of known schemes
        return self.issuers[name]

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, per-scheme state): ready only when every scheme can issue right now."""
        detail = {}
        ready = True
        for name, issuer in self.issuers.items():
            try:
                issuer.check()
                detail[name] = {"ready": True}
            except NotReadyError as exc:
                ready = False
                detail[name] = {"ready": False, "reason": exc.reason}
        return ready, detail
