"""The identity behind one scheme's generator: :class:`IdentityHolder` claims it, records its high-water marks,
keeps it (one round at a time: :meth:`IdentityHolder.tend`, scheduled by the background task, :class:`Keeper`),
gives it up (stop, drop), and alone answers "may this scheme issue now, and with which generator?"
(:meth:`IdentityHolder.check`) and "how long may a request wait for the clock?" (:meth:`IdentityHolder.clock_wait`).
The :class:`~app.issuing.issuer.Issuer` on top only asks, issues and meters.

The holder is told of a loss, never polls for one: it registers :meth:`~app.storage.lease.Claim.on_lost` on every
claim, and a lost lease or a deleted claim key drops the generator at once (the next request answers 503) and
wakes the background task to claim again. A deadline that passes without a confirmed refresh is a matter of time,
not an event: :meth:`IdentityHolder.check` compares it on the backend's monotonic clock (``backend.clock``), the
same clock the deadline was computed on.

Claiming follows the refusal policy of :mod:`app.issuing.node`: an identity whose high-water mark is ahead of this
node's clock by more than ``settings.max_clock_wait`` is refused (released, excluded from later claims unless it is
static, logged, counted) and another is claimed; the same happens to a running identity when the clock is stepped
back that far under a request (:meth:`IdentityHolder.clock_wait`, which renews a generator that claims nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any

from app.errors import InvalidOptionError, NotReadyError, PoolExhaustedError
from app.metrics import SchemeMetrics
from app.schemes.base import Clock, Generator, Scheme
from app.schemes.pool import IdentityPool
from app.storage.history import PENDING, HistoryGuard
from app.storage.lease import REVOKED_REASON, Claim, ClaimObserver, LeaseBackend, Owner

log = logging.getLogger("idmint.node")  # the logger these lines always had (operators filter on it)

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0
FAULT_RETRY_MAX_S = 2.0
"""Longest pause between retries of a failed high-water-mark record (the disk may recover at any moment)."""
INHERITED_WAIT_READY_S = 1.0
"""A scheme whose generator must wait longer than this for the clock to pass an inherited mark is not ready."""
PEER_RETRY_AFTER_S = 5
"""Retry-After (s) of a scheme stopped because a peer fleet's identities overlap ours (an operator must act)."""

GeneratorFactory = Callable[[list[int], int], Generator]
"""(claimed identities, floor in native units) -> generator."""

PEER_CHECK_PENDING = "checking the peer fleets"
"""How :mod:`app.issuing.fleet` names the wait for its first round (not an error: logged by the guard itself)."""

SETTINGS_RECORD = "settings.{scheme}"
"""The fleet record (:meth:`~app.storage.lease.LeaseBackend.read_record`) of a scheme's settings that every replica
must share: the region and the region count of a sliced pool, and what :meth:`Scheme.identity_settings
<app.schemes.base.Scheme.identity_settings>` names (snowflake's layout)."""
SETTINGS_RETRY_AFTER_S = 30
"""Retry-After (s) of a scheme whose settings differ from the fleet's record (an operator must act)."""
STARTING_REASON = "starting: no identity claimed yet"
"""Why a holder has no generator before its first claim was tried (followed by storage's own word, when it has
one: :attr:`IdentityHolder.storage_reason`)."""


def fleet_settings(scheme: Scheme, pool: IdentityPool | None, settings: Any) -> dict[str, Any]:
    """What every replica of a fleet must share for ``scheme`` (its :data:`SETTINGS_RECORD`): ``region`` and
    ``regions`` when regions slice its pool, plus :meth:`Scheme.identity_settings`; {} when nothing (no pool)."""
    if pool is None:
        return {}
    out = dict(scheme.identity_settings(settings))
    if pool.sliced:
        out.update(region=pool.region, regions=pool.regions)
    if pool.reserved:
        out["backfill_identities"] = pool.reserved
    return out


def settings_words(values: dict[str, Any]) -> str:
    """``"layout twitter, region 0 of 1"`` (a :func:`fleet_settings` record in words)."""
    rest = {k: v for k, v in values.items() if k not in ("region", "regions")}
    words = [f"{key} {value}" for key, value in sorted(rest.items())]
    if "regions" in values:
        words.append(f"region {values.get('region')} of {values['regions']}")
    return ", ".join(words) or "no settings"


NO_MARK_NEEDED = 1 << 128
"""The "recorded mark" of a scheme without a claimed identity (Wiji): its IDs never wait for a record."""


async def register(backend: LeaseBackend, owner: Owner, scheme: str, published: str) -> None:
    """Publish what ``scheme``'s generator registers (Wiji's random part) with ``owner``'s details; a failure is
    logged, not raised."""
    try:
        await backend.register(scheme, published, {"holder": owner.as_dict()})
    except NotReadyError as exc:
        log.warning("%s: registering %s failed: %s", scheme, published, exc.reason)


class IdentityHolder:
    """One scheme's claimed identities (``pool.claims`` of them from ``pool``; none when ``pool`` is None), their
    recorded high-water mark, and the generator built on them (``generator``, None while nothing valid is held).

    Collaborators are arguments, with no reference back to the node: ``backend`` (claims, and the monotonic clock
    its deadlines are on), ``owner`` (written into each claim), ``clock`` (the generators' clock, ns),
    ``max_clock_wait`` (seconds: the refusal limit of :mod:`app.issuing.node`).

    :attr:`reason`/:attr:`retry_after` say why there is no generator; ``fault`` why the last mark record failed (not
    ready until one succeeds); ``ready_at_ns`` the clock reading (ns) before which a new generator must wait for an
    inherited mark (0 = none). ``sharers`` are the metrics of schemes issuing from this holder's generator
    (TypeID on UUIDv7's): their lease gauge follows this one's.
    """

    def __init__(
        self,
        scheme: Scheme,
        factory: GeneratorFactory,
        pool: IdentityPool | None,
        metrics: SchemeMetrics,
        *,
        backend: LeaseBackend,
        owner: Owner,
        clock: Clock,
        max_clock_wait: float,
        observer: ClaimObserver | None = None,
        fleet_id: Callable[[], str | None] = lambda: None,
        fleet_settings: dict[str, Any] | None = None,
        storage_reason: Callable[[], str | None] | None = None,
        history: HistoryGuard | None = None,
    ) -> None:
        self.backend = backend
        self.storage_reason = storage_reason or (lambda: None)
        """Why storage cannot be used now, in its own words (None: it can, or cannot tell): named after
        :data:`STARTING_REASON` until the first claim was tried (storage that never answers at start-up)."""
        self.history = history
        """Whether the store's history is the fleet's (:mod:`app.storage.history`): nothing is claimed, and a leased
        identity issues nothing, while it is changed or unchecked; its fence's floor raises every claim's mark.
        None: not checked."""
        self.fleet_settings = fleet_settings or {}
        """The settings every replica of the fleet must share for this scheme (:func:`fleet_settings`), checked
        against the fleet's record before each claim; {}: none."""
        self.observer = observer
        """Told of every claim made and given up (the claim ledger); None: nobody."""
        self.fleet_id = fleet_id
        """Reads this fleet's ID (None while not known): the fleet each claim told to :attr:`observer` was made in."""
        self.owner = owner
        self.clock = clock
        self.max_clock_wait = max_clock_wait
        self.scheme = scheme
        self.name = scheme.name
        self.factory = factory
        self.pool = pool
        self.metrics = metrics
        self.generator: Generator | None = None
        self.claims: list[Claim] = []
        self.recorded_mark = -1
        self._reason = STARTING_REASON
        self._retry_after = 1
        self.excluded: set[int] = set()
        """Identities an operator freed for another node (revoked from this one): not claimed again."""
        self.ahead: dict[int, int] = {}
        """Identities refused by this node because their high-water mark was too far ahead of its clock (at a claim,
        or the clock stepped back under the running generator) -> this node's clock (ns) at which the mark is back
        within ``max_clock_wait``: not claimed again before then, so a node whose whole pool was refused claims
        again once its clock has caught up instead of staying not ready until restarted."""
        self.blocked: str | None = None
        """Why a peer fleet check stops this scheme (:mod:`app.issuing.fleet`: an overlapping fleet), else None."""
        self.fault: str | None = None
        """Why the last high-water-mark record failed (the scheme is not ready until one succeeds), else None."""
        self.ready_at_ns = 0
        """Clock reading (ns) before which the generator must wait for an inherited mark; 0 = none."""
        self.sharers: list[SchemeMetrics] = []
        """The metrics of the schemes issuing from this holder's generator (:meth:`share_with`)."""
        self._mark_lock = asyncio.Lock()
        self.wake = asyncio.Event()
        """Set to wake the background task (:class:`Keeper`) at once: a loss, a refusal."""

    @property
    def reason(self) -> str:
        """Why there is no generator (the last claim round's failure, a loss, a refusal, a stop); "" while one is
        held. Changed only by the holder's own methods."""
        return self._reason

    @property
    def retry_after(self) -> int:
        """The Retry-After (s) of a refusal for :attr:`reason` (or for a mark fault)."""
        return self._retry_after

    def claim_failed(self, reason: str, retry_after: int) -> None:
        """A claim round failed for ``reason``: while no generator is held, that is why this scheme is not ready
        (503 + ``retry_after`` s) until a claim succeeds; a generator still held carries on."""
        if self.generator is None:
            self._reason, self._retry_after = reason, retry_after

    def share_with(self, metrics: SchemeMetrics) -> None:
        """Another scheme (``metrics``: its own) issues from this holder's generator: its lease gauge follows this
        one's."""
        self.sharers.append(metrics)

    def history_changed(self, reason: str | None) -> None:
        """The store went back in time (``reason``): a leased identity stops at once (its claims are dropped); its
        history is confirmed or fenced (None): claim at once. Nothing for a holder that leases nothing."""
        if self.pool is None:
            return
        if reason is None:
            self.wake.set()
        elif self.generator is not None:
            self.drop(reason)

    def _named(self, reason: str | None) -> str:
        """``reason`` led by the scheme's name, once (storage's reasons already name it); the start-up reason and
        the unchecked storage history's followed by storage's own (:attr:`storage_reason`)."""
        text = reason or ""
        if text in (STARTING_REASON, PENDING):
            why = self.storage_reason()
            text = f"{text}: {why}" if why else text
        return text if text.startswith(f"{self.name}: ") else f"{self.name}: {text}"

    def _lease_held(self, held: bool, identity: int | None) -> None:
        """The one writer of ``idmint_lease_held`` / ``idmint_node_identity_info`` (for sharers too)."""
        for metrics in (self.metrics, *self.sharers):
            metrics.lease_held(held, identity)

    def set_blocked(self, reason: str | None) -> None:
        """Stop issuing for ``reason`` (a peer fleet's identities overlap ours), or resume with None. Claims are
        kept: issuing resumes as soon as the overlap is gone."""
        if reason == self.blocked:
            return
        if reason is None:
            if self.blocked is not None and not self.blocked.startswith(PEER_CHECK_PENDING):
                log.warning("%s: no peer fleet overlaps any more; issuing", self.name)
        elif not reason.startswith(PEER_CHECK_PENDING):
            log.error("%s: stopped issuing: %s", self.name, reason)
        self.blocked = reason

    def identity_words(self) -> str:
        """The claimed identities for a message: ``"generator ID 3, 4"``."""
        kind = self.pool.kind if self.pool is not None else "identity"
        return f"{kind} {', '.join(str(c.identity) for c in self.claims)}"

    # -- may this scheme issue now? -------------------------------------------------------------------------
    def check(self) -> Generator:
        """The generator, if every claim behind it is still valid, its mark can be recorded and it need not wait
        long for an inherited mark; else raise NotReadyError (dropping the claims when one is lost or late)."""
        gen = self.generator
        history = self.history
        if history is not None and history.refusal is not None and self.pool is not None:
            raise NotReadyError(self._named(history.refusal), history.retry_after)
        if gen is None:
            raise NotReadyError(self._named(self.reason), self.retry_after)
        if self.fault is not None:
            raise NotReadyError(self._named(self.fault), self.retry_after)
        if self.blocked is not None:
            raise NotReadyError(self._named(self.blocked), PEER_RETRY_AFTER_S)
        if self.ready_at_ns:
            self._check_inherited_wait()
        if self.claims and self.drop_lost_claims():
            raise NotReadyError(self._named(self.reason), self.retry_after)
        gen.check_time()  # a layout whose time ran out (or has not begun): 503 and not ready, this scheme only
        return gen

    def _check_inherited_wait(self) -> None:
        left_s = (self.ready_at_ns - self.clock()) / 1e9
        if left_s <= INHERITED_WAIT_READY_S:
            self.ready_at_ns = 0
            return
        raise NotReadyError(
            f"{self.name}: waiting {left_s:.1f} s for the clock to pass the high-water mark "
            f"inherited with {self.identity_words()}",
            math.ceil(left_s),
        )

    def drop_lost_claims(self) -> bool:
        """Drop every claim (:meth:`drop`) when any is lost or past its deadline on the backend's clock; True when
        they were dropped. (A loss is pushed by :meth:`_claim_lost` first; this also catches a passed deadline.)"""
        if self.claims:
            now = self.backend.clock()
            for claim in self.claims:
                if claim.lost or now >= claim.deadline:
                    why = "lease lost" if claim.lost else "lease deadline passed (refresh not confirmed in time)"
                    self.drop(f"{why} for {self.pool.kind if self.pool else 'identity'} {claim.identity}")
                    return True
        return False

    def _claim_lost(self, claim: Claim, reason: str) -> None:
        """Told by a claim the moment it is lost: stop issuing from it at once and claim again."""
        if claim in self.claims:
            kind = self.pool.kind if self.pool else "identity"
            if reason == REVOKED_REASON and self.pool is not None and self.pool.static is None:
                self.excluded.add(claim.identity)  # an operator freed it for another node: not ours to re-claim
            self.drop(f"lease lost for {kind} {claim.identity}")

    # -- the clock behind the last timestamp issued ----------------------------------------------------------
    def clock_wait(self, gen: Generator | None, wait: float, asker: str) -> float:
        """The seconds a request of scheme ``asker`` may sleep for the clock, ``wait`` s behind the last timestamp
        of ``gen`` (this holder's generator the request issues from; None: one it no longer holds): ``wait``
        itself within max_clock_wait. Past it the clock was stepped back: a generator that claims nothing is
        renewed (:meth:`_renew_unclaimed`; 0.0: the fresh one serves at once), a claimed identity is refused
        (:meth:`_refuse_running`), and the request is not slept: NotReadyError (503 + Retry-After)."""
        limit = self.max_clock_wait
        if wait <= limit:
            return wait
        if gen is not None and gen is self.generator:
            if self.claims:
                self._refuse_running(wait, limit)
            elif self.pool is None:
                self._renew_unclaimed(wait, limit)  # nothing to claim: a fresh generator serves at once
                return 0.0
        raise NotReadyError(
            f"{asker}: the clock is {wait:.3f} s behind the last timestamp issued "
            f"(limit IDMINT_MAX_CLOCK_WAIT {limit:g} s)",
            math.ceil(min(wait, BACKOFF_MAX_S)),
        )

    def _renew_unclaimed(self, wait: float, limit: float) -> None:
        """The clock stepped back more than max_clock_wait under a generator that claims nothing (Wiji: its
        identity is its random part): start a fresh one, as a new process would, and publish it."""
        log.warning(
            "%s: the clock stepped back %.3f s behind the last timestamp issued (limit %g s); starting a "
            "fresh generator",
            self.name,
            wait,
            limit,
        )
        self.metrics.identity_refused("clock_stepped_back")
        gen = self.generator = self.factory([], -1)
        published = self.scheme.registration(gen)
        if published:
            asyncio.get_running_loop().create_task(register(self.backend, self.owner, self.name, published))

    def _refuse_running(self, wait: float, limit: float) -> None:
        """The clock stepped back more than max_clock_wait under the running generator: give the identity up
        (its exact final mark recorded) and let the background task claim another, as at start-up."""
        gen, claims = self.generator, list(self.claims)
        words = self.identity_words()
        log.warning(
            "%s: refused %s: the clock stepped back %.3f s behind its last timestamp (limit %g s); claiming another",
            self.name,
            words,
            wait,
            limit,
        )
        for _claim in claims:
            self.metrics.identity_refused("clock_stepped_back")
        if self.pool is not None and self.pool.static is None:
            until = self.clock() + int((wait - limit) * 1e9)
            self.ahead.update((c.identity, until) for c in claims)
        final = gen.high_water if gen is not None else None
        self.generator, self.claims = None, []
        self._reason = f"refused {words}: the clock stepped back {wait:.3f} s (limit {limit:g} s)"
        self._retry_after = 1
        for claim in claims:
            asyncio.get_running_loop().create_task(self._release_quietly(claim, final))
        self._lease_held(False, None)
        self.wake.set()

    # -- high-water marks ----------------------------------------------------------------------------------
    async def record_mark(self, at_least: int = -1) -> None:
        """Record a mark ``mark_horizon`` seconds ahead of the clock (and at or above ``at_least``)."""
        async with self._mark_lock:
            horizon = self.scheme.native_from_ns(self.clock() + int(self.backend.mark_horizon * 1e9))
            target = max(at_least, horizon)
            if target <= self.recorded_mark or not self.claims:
                return
            try:
                # Every claim's mark at once (eight-byte may hold 16 generator IDs: one fsync or etcd round trip
                # each, which in turn held requests up to 1.8 s on a busy disk). All must be recorded before the
                # mark is used; a mark written for one claim while another failed is only higher than needed.
                results = await asyncio.gather(
                    *(claim.record_mark(target) for claim in list(self.claims)), return_exceptions=True
                )
                failed = [r for r in results if isinstance(r, BaseException)]
                if failed:
                    raise failed[0]
            except NotReadyError as exc:
                self._fault(exc.reason)
                raise
            except OSError as exc:  # a backend that let one through: the same fault
                self._fault(f"recording the high-water mark failed: {exc}")
                raise NotReadyError(self._named(self.fault), self.retry_after) from exc
            if self.fault is not None:
                log.warning("%s: high-water mark recorded again; issuing", self.name)
                self.fault = None
            self.recorded_mark = target
            self.metrics.high_water_mark(target * self.scheme.native_unit_ns / 1e9)

    def _fault(self, reason: str) -> None:
        if self.fault is None:
            log.error("%s: stopped issuing: %s", self.name, reason)
        self.fault = reason
        self._retry_after = 2

    # -- claiming ------------------------------------------------------------------------------------------
    def drop(self, reason: str) -> None:
        """Stop issuing for ``reason`` (a claim is lost or past its deadline): release every claim without a final
        mark and wake the background task to claim again."""
        if self.generator is not None:
            log.error("%s: stopped issuing: %s", self.name, reason)
        self.generator = None
        self._reason = reason
        self._retry_after = 1
        claims, self.claims = self.claims, []
        for claim in claims:
            asyncio.get_running_loop().create_task(self._release_quietly(claim, None))
        self._lease_held(False, None)
        self.wake.set()

    async def _release_quietly(self, claim: Claim, final_mark: int | None) -> None:
        if self.observer is not None:
            self.observer.ended(claim)  # before the release: a lost claim still says so
        try:
            await self.backend.release(claim, final_mark)
        except Exception as exc:  # release is best effort; the lease expires anyway
            log.warning("%s: releasing %s failed: %s", self.name, claim.key, exc)

    async def check_fleet_settings(self) -> None:
        """The fleet's record of this scheme's settings (:data:`SETTINGS_RECORD`) must be this node's: the first node
        to ask writes it; a node whose settings differ claims nothing and is not ready, naming both and the fix
        (NotReadyError), so a change of layout or regions is a deliberate step, never a silent overlap."""
        if not self.fleet_settings:
            return
        name = SETTINGS_RECORD.format(scheme=self.name)
        stored = await self.backend.read_record(name)
        if stored is None and await self.backend.swap_record(name, None, self.fleet_settings):
            log.info("%s: recorded the fleet's settings: %s", self.name, settings_words(self.fleet_settings))
            return
        stored = stored if stored is not None else await self.backend.read_record(name)
        if stored == self.fleet_settings:
            return
        raise NotReadyError(
            f"{self.name}: this node's {settings_words(self.fleet_settings)} differ from the fleet's "
            f"{settings_words(stored or {})} (fleet record {name}): replicas of one fleet must agree on them, or two "
            "could issue the same IDs. Run this node with the fleet's settings; to change them, drain every replica "
            "on the old ones (POST /v1/admin/drain), then adopt the new ones (IDMINT_* settings) with POST "
            f"/v1/admin/fleet/settings/{self.name} on a node that has them, or run them as a new fleet in a region "
            "of its own (IDMINT_REGIONS / IDMINT_REGION)",
            retry_after=SETTINGS_RETRY_AFTER_S,
        )

    async def check_history(self) -> None:
        """Raise NotReadyError unless the store's history is the fleet's (checked first when it never was)."""
        history = self.history
        if history is None:
            return
        if history.refusal == PENDING:
            try:
                await history.round()
            except NotReadyError as exc:  # storage's own reason (unreachable, refused...) says more than "pending"
                raise NotReadyError(self._named(f"{PENDING}: {exc.reason}"), exc.retry_after) from exc
        if history.refusal is not None:
            raise NotReadyError(self._named(history.refusal), history.retry_after)

    def fence_floor(self) -> int:
        """The last storage fence's high-water-mark floor in this scheme's native units (-1: none)."""
        floor_ns = self.history.mark_floor_ns if self.history is not None else -1
        return self.scheme.native_from_ns(floor_ns) if floor_ns >= 0 else -1

    async def fleet_record(self) -> dict[str, Any] | None:
        """The fleet's record of this scheme's settings (None: none yet). Raises NotReadyError."""
        return await self.backend.read_record(SETTINGS_RECORD.format(scheme=self.name))

    async def adopt_fleet_settings(self) -> dict[str, Any] | None:
        """Make this node's settings the fleet's record (the caller made sure no node holds claims under the
        recorded ones); returns the record replaced (None: there was none). Raises NotReadyError when the backend
        cannot be used now, InvalidOptionError when this scheme keeps no fleet settings."""
        if not self.fleet_settings:
            raise InvalidOptionError(f"{self.name} keeps no fleet settings (it leases no identity that regions slice)")
        name = SETTINGS_RECORD.format(scheme=self.name)
        for _ in range(3):
            stored = await self.backend.read_record(name)
            if stored == self.fleet_settings or await self.backend.swap_record(name, stored, self.fleet_settings):
                log.warning(
                    "%s: the fleet's settings are now %s (were %s)",
                    self.name,
                    settings_words(self.fleet_settings),
                    settings_words(stored) if stored is not None else "unrecorded",
                )
                self.wake.set()
                return stored
        raise NotReadyError(f"{self.name}: fleet record {name} keeps changing under us; try again", retry_after=2)

    async def acquire(self) -> None:
        """Claim identities and build the generator. Raises NotReadyError when it cannot (the fleet's settings
        differ from ours: :meth:`check_fleet_settings`)."""
        limit = self.max_clock_wait
        if self.pool is None:
            self.generator = self.factory([], -1)
            self.recorded_mark = NO_MARK_NEEDED
            self._reason = ""
            self._lease_held(True, None)
            return
        await self.check_history()
        await self.check_fleet_settings()
        while True:
            claims: list[Claim] = []
            now_ns = self.clock()
            self.ahead = {identity: until for identity, until in self.ahead.items() if until > now_ns}
            try:
                for _ in range(self.pool.claims):
                    exclude = frozenset(self.excluded | self.ahead.keys() | {c.identity for c in claims})
                    claim = await self.backend.claim(self.pool, self.owner, exclude)
                    claims.append(claim)
                    claim.on_lost(self._claim_lost)
            except PoolExhaustedError as exc:
                for claim in claims:
                    await self._release_quietly(claim, None)
                if not self.ahead:
                    raise
                wait_s = (min(self.ahead.values()) - now_ns) / 1e9
                refused_ids = ", ".join(map(str, sorted(self.ahead)))
                raise PoolExhaustedError(
                    f"{exc.reason}, or refused by this node: {self.pool.kind} {refused_ids} "
                    f"had a high-water mark more than {limit:g} s ahead of its clock (IDMINT_MAX_CLOCK_WAIT); the "
                    f"first is claimable again in {wait_s:.1f} s",
                    retry_after=max(exc.retry_after, math.ceil(wait_s)),
                ) from exc
            except BaseException:
                for claim in claims:
                    await self._release_quietly(claim, None)
                raise
            fence_floor = self.fence_floor()
            floor = max(fence_floor, *(c.high_water_mark for c in claims))
            now_native = self.scheme.native_from_ns(self.clock())
            fence_ahead_s = (fence_floor - now_native) * self.scheme.native_unit_ns / 1e9
            if fence_floor > max(c.high_water_mark for c in claims) and fence_ahead_s > limit:
                for claim in claims:
                    await self._release_quietly(claim, None)
                raise NotReadyError(
                    f"{self.name}: the storage fence raised every high-water mark to {fence_ahead_s:.3f} s ahead of "
                    f"this node's clock (limit {limit:g} s, IDMINT_MAX_CLOCK_WAIT): claimable once the clock is there",
                    retry_after=max(1, math.ceil(fence_ahead_s - limit)),
                )
            ahead_s = (floor - now_native) * self.scheme.native_unit_ns / 1e9
            if ahead_s > limit:
                refused = [
                    c for c in claims if (c.high_water_mark - now_native) * self.scheme.native_unit_ns / 1e9 > limit
                ]
                for claim in claims:
                    await self._release_quietly(claim, None)
                ids = ", ".join(str(c.identity) for c in refused)
                log.warning(
                    "%s: refused %s %s: its high-water mark is %.3f s ahead of this node's clock (limit %g s)",
                    self.name,
                    self.pool.kind,
                    ids,
                    ahead_s,
                    limit,
                )
                for _claim in refused:
                    self.metrics.identity_refused("high_water_mark_ahead")
                if self.pool.static is not None:
                    raise NotReadyError(
                        f"static {self.pool.kind} {ids} has a high-water mark {ahead_s:.3f} s ahead of this "
                        f"node's clock (limit {limit:g} s)",
                        retry_after=5,
                    )
                for c in refused:
                    c_ahead_s = (c.high_water_mark - now_native) * self.scheme.native_unit_ns / 1e9
                    self.ahead[c.identity] = self.clock() + int((c_ahead_s - limit) * 1e9)
                continue
            self.claims = claims
            self.recorded_mark = floor
            try:
                await self.record_mark(floor)
                # Inside: a generator that cannot issue at all (TimeRangeError) gives its claims back too.
                self.ready_at_ns = self._inherited_wait_until([c.identity for c in claims], floor)
            except BaseException:
                self.claims = []
                for claim in claims:
                    await self._release_quietly(claim, None)
                raise
            self.generator = self.factory([c.identity for c in claims], floor)
            self.fault = None
            self._reason = ""
            held = [c.identity for c in claims]
            if self.observer is not None:
                unit_ns = self.scheme.native_unit_ns
                for claim in claims:  # its IDs are dated from the unit after the inherited mark on
                    mark = max(claim.high_water_mark, fence_floor)
                    floor_ns = int((mark + 1) * unit_ns) if mark >= 0 else -1
                    self.observer.claimed(claim, self.pool, self.owner, floor_ns, self.fleet_id())
            log.info(
                "%s: claimed %s %s (high-water mark %d); issuing",
                self.name,
                self.pool.kind,
                ", ".join(map(str, held)),
                floor,
            )
            for identity in held:
                self._lease_held(True, identity)
            return

    def _inherited_wait_until(self, identities: list[int], floor: int) -> int:
        """The clock reading (ns) until which a generator on ``floor`` must wait before it can issue (0 = none).

        Asked of a throwaway generator (its ID is never used): logical-clock schemes (Muid, HLC-ULID) issue at
        once, the others report how long they must wait."""
        probe = self.factory(identities, floor)
        if probe.generate(1).count:
            return 0
        wait_ns = probe.wait_ns()
        return self.clock() + wait_ns if wait_ns > INHERITED_WAIT_READY_S * 1e9 else 0

    # -- the background task's round (scheduled by :class:`Keeper`) -------------------------------------------
    async def tend(self) -> None:
        """Claim while no generator is held; else drop every claim when one is lost or late (NotReadyError) or
        keep the mark ahead of the clock. Raises NotReadyError when it cannot."""
        if self.generator is None:
            await self.acquire()
        elif self.claims:
            if self.drop_lost_claims():
                raise NotReadyError(self._named(self.reason), self.retry_after)
            await self.record_mark()

    async def stop(self, reason: str = "stopping") -> None:
        """Record the exact final mark and release every claim, after any mark write in flight: under the mark
        lock, so the two never write one claim's mark at once (a write whose await was cancelled may still run in
        its thread: the embedded backend's claim waits for it before the final mark). ``reason`` is why the scheme
        issues no more (:attr:`reason`)."""
        gen, claims = self.generator, self.claims
        self.generator, self.claims = None, []
        self._reason = reason
        final = gen.high_water if gen is not None else None
        async with self._mark_lock:
            for claim in claims:
                valid = claim.valid()
                await self._release_quietly(claim, final if valid else None)
        self._lease_held(False, None)


class Keeper:
    """The background task of one :class:`IdentityHolder`: :meth:`IdentityHolder.tend` every
    ``backend.mark_interval`` seconds (sooner when a claim's deadline comes first), and at once when the holder
    sets its ``wake`` event (a loss, a refusal): claims (with backoff), keeps the mark ahead of the clock,
    re-claims after a loss."""

    def __init__(self, holder: IdentityHolder) -> None:
        self.holder = holder

    async def run(self) -> None:
        """Run until cancelled. Survives any exception: each is logged once per distinct reason and retried with
        backoff (a failed mark record at most every FAULT_RETRY_MAX_S, so issuing resumes soon after the disk
        recovers)."""
        holder = self.holder
        backoff = BACKOFF_START_S
        last_reason: str | None = None
        interval = holder.backend.mark_interval
        while True:
            holder.wake.clear()  # a loss while tend() runs (a mark write in flight) wakes the sleep after it
            try:
                await holder.tend()
                backoff = BACKOFF_START_S
                last_reason = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the task must outlive any fault; each is logged
                if isinstance(exc, NotReadyError):
                    reason = exc.reason
                    holder.claim_failed(exc.reason, exc.retry_after)
                else:
                    reason = f"internal error: {exc!r}"
                    holder.claim_failed(reason, 2)
                    if reason != last_reason:
                        log.exception("%s: background task: %s", holder.name, reason)
                if reason != last_reason:
                    if reason != holder.fault:  # a mark fault was logged where it happened
                        log.warning("%s: not ready: %s", holder.name, reason)
                    last_reason = reason
                pause = min(backoff, FAULT_RETRY_MAX_S) if holder.fault is not None else backoff
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                holder.wake.clear()  # a failing round backs off, whatever it set on its way
                await self._sleep(pause)
                continue
            deadline = min((c.deadline for c in holder.claims), default=math.inf)
            await self._sleep(min(interval, max(deadline - holder.backend.clock(), 0.01)))

    async def _sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` or until woken (a loss, a refusal), at once when woken since the round began (the
        event is cleared as a round starts, not here: a loss that arrived during the round is not lost).
        ``asyncio.timeout``, not ``wait_for``: Python 3.11's ``wait_for`` swallows a cancellation that meets a set
        event, and the task then outlives ``stop``."""
        wake = self.holder.wake
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await wake.wait()
