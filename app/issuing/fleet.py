"""Who this fleet is, and the guard that keeps it from sharing identities with another fleet.

A **fleet** is every node that shares one lease backend (one etcd namespace, or one embedded state directory):
inside it, the backend makes every claimed identity exclusive. Two fleets share nothing, so only their
configuration keeps them apart: regions (:mod:`app.schemes.pool`) give each fleet a disjoint slice of every leased
identity space. The guard here checks that configuration against the fleets it is told about:

* :meth:`FleetGuard.document` is ``GET /v1/fleet``: ``{"fleet_id", "member", "region", "regions", "backend",
  "schemes": {name: {"kind", "slice", "pool", "group", "group_in_id"}}, "peers": {url: {...}}}`` for every scheme
  whose uniqueness rests on a leased identity (and Muid when its medallion is static). ``member`` is a token of this
  process that only a node on the same backend can confirm (:meth:`~app.storage.lease.LeaseBackend.has_member`), so a
  fleet ID copied with a cloned state directory or a restored etcd snapshot is told apart from the real fleet.
* with ``IDMINT_PEER_FLEETS`` set, :meth:`FleetGuard.run` reads each peer's ``/v1/fleet`` at start and every
  ``IDMINT_PEER_CHECK_INTERVAL`` seconds. A peer of another fleet whose pool for a scheme overlaps ours
  (:func:`overlap`) makes that scheme not ready here (503 naming the peer and the scheme), until a later answer
  shows the overlap gone. The guard fails closed until it knows: until the first round is over the guarded
  schemes are not ready (it asks a peer that does not answer again for up to one interval, so fleets started
  together see each other before either issues), and after it they stay not ready while any listed peer has
  never given a fleet document (``/readyz`` names the peer and what was wrong: refused, HTTP 404, not a fleet
  document). A peer that gave one is remembered in storage (the fleet record ``peer.<digest of its URL>``:
  its last document), so after a restart, or while it cannot be reached, takes longer than
  :data:`PEER_TIMEOUT_S` or answers anything but a well-formed fleet document, its last-known ranges are what
  it is judged by; ``/v1/fleet``'s ``peers``, ``/readyz`` and ``idmint_peer_fleet_up{peer}`` show it
  unreachable.
* A check carries our fleet ID in the ``Idmint-Fleet`` request header; a node that sees another fleet's ID there
  runs its own round at once (at most once a second), so when both fleets list each other, the node that started
  first stops as soon as the second one asks, before that one issues anything. A fleet that does not list the
  other never asks, so each fleet must list the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from app.errors import NotReadyError
from app.issuing.holder import BACKOFF_MAX_S, PEER_CHECK_PENDING

if TYPE_CHECKING:
    import httpx  # imported where a peer is asked: only a node with peer fleets needs it, not every start

    from app.metrics import Metrics
    from app.schemes.pool import IdentityPool
    from app.settings import Settings
    from app.storage.base import Storage

log = logging.getLogger("idmint.fleet")

FLEET_HEADER = "Idmint-Fleet"
"""Request header of a peer check: the asking node's fleet ID."""
PEER_TIMEOUT_S = 2.0
"""The longest one peer's ``/v1/fleet`` may take, whole (connect, headers and body), before it counts as
unreachable this round."""
PEER_DOCUMENT_MAX_BYTES = 64 * 1024
"""A peer's fleet document larger than this is not read (a fleet document is a few hundred bytes)."""
PEER_RECORD = "peer.{digest}"
"""The fleet record of a peer's last fleet document (``digest``: the first 24 hex digits of its URL's SHA-256)."""
FIRST_ROUND_RETRY_S = 0.25
"""How often the first round asks a peer that has not answered yet (it may be starting too)."""
POKE_MIN_INTERVAL_S = 1.0
"""Rounds started by a peer's check (:meth:`FleetGuard.poke`) run at most this often."""


def overlap(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """Whether two fleets' entries for one scheme (``/v1/fleet`` ``schemes`` members) may issue the same ID.

    When both carry their group in every ID (eight-byte's cluster ID, SIQ's domain hash), different groups never
    meet. A group the ID does not carry (a snowflake layout) cannot keep them apart, and two different ones cannot
    be compared by identity numbers either (worker 682 in 10 bits and worker 2728 in 12 bits give the same bits), so
    different such groups count as an overlap. Otherwise the identity ranges decide."""
    in_id = ours.get("group_in_id") and theirs.get("group_in_id")
    if ours.get("group") != theirs.get("group"):
        return not in_id
    (a_low, a_high), (b_low, b_high) = ours["pool"], theirs["pool"]
    return bool(a_low <= b_high and b_low <= a_high)


def valid_document(doc: object) -> dict[str, Any] | None:
    """``doc`` when it is a well-formed fleet document (a UUID fleet ID; int region and regions; each scheme entry
    with two int bounds, a str group of at most 64 characters and a bool ``group_in_id``), else None."""
    if not isinstance(doc, dict):
        return None
    try:
        uuid.UUID(str(doc["fleet_id"]))
        member = doc.get("member")
        schemes = doc["schemes"]
        if not (isinstance(member, str | None) and isinstance(schemes, dict) and len(schemes) <= 64):
            return None
        if not all(type(doc[key]) is int for key in ("region", "regions")):
            return None
        for entry in schemes.values():
            low, high = entry["pool"]
            if not (type(low) is int and type(high) is int and isinstance(entry["group"], str)):
                return None
            if len(entry["group"]) > 64 or not isinstance(entry["group_in_id"], bool):
                return None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return doc


def listens_beyond_loopback(host: str) -> bool:
    """True when ``host`` (a bind address) is reachable from other machines: any address but loopback."""
    if host in ("localhost", "ip6-localhost"):
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a host name other than localhost: assume it resolves beyond this machine


class FleetGuard:
    """This node's fleet identity and its peer checks, on ``storage``'s lease backend. ``pools``: scheme name -> the
    identity pool it claims from (schemes whose uniqueness rests on a leased identity, and a static Muid
    medallion); ``block``: called with (scheme, reason or None) when a scheme must stop (or may resume) issuing
    because of a peer fleet."""

    def __init__(
        self,
        settings: Settings,
        storage: Storage,
        pools: Mapping[str, IdentityPool],
        block: Callable[[str, str | None], None],
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.backend = storage.leases
        self.metrics = metrics
        self.pools = dict(pools)
        self.block = block
        self.peers = list(settings.peer_fleets)
        self.fleet_id: str | None = None
        self.verdicts: dict[str, dict[str, str] | None] = dict.fromkeys(self.peers)
        """peer URL -> {scheme: reason} for the overlaps its last known document shows; None while it has never
        given one (answered now, or remembered in storage): then the guarded schemes are not ready."""
        self.reachable: dict[str, bool | None] = {peer: None for peer in self.peers}
        self.problem: dict[str, str] = {}
        """peer URL -> what was wrong with its last answer (refused, HTTP 404, not a fleet document...)."""
        self.remembered: dict[str, dict[str, Any] | None] = {}
        """peer URL -> its fleet record as last read or written (None: none stored)."""
        self.seen: dict[str, str] = {}
        """peer URL -> the fleet ID it last answered with."""
        self._wake = asyncio.Event()
        self._fleet_id_warned = False
        self._last_round = 0.0
        self._first_round_done = not self.peers
        if self.peers:
            for scheme in self.pools:
                self.block(scheme, f"{PEER_CHECK_PENDING} (IDMINT_PEER_FLEETS) before issuing")
            if metrics is not None:
                for peer in self.peers:
                    metrics.peer_fleet_up(peer, False)

    # -- what we are ---------------------------------------------------------------------------------------
    async def read_fleet_id(self) -> str | None:
        """This fleet's ID from the backend (cached once read); None while the backend cannot tell."""
        if self.fleet_id is None:
            try:
                self.fleet_id = await self.backend.fleet_id()
            except NotReadyError as exc:
                if not self._fleet_id_warned:
                    log.warning("fleet ID not readable yet (retried): %s", exc.reason)
                self._fleet_id_warned = True
        return self.fleet_id

    def document(self) -> dict[str, Any]:
        """The ``GET /v1/fleet`` answer (``fleet_id`` null while the backend has not told it)."""
        settings = self.settings
        return {
            "fleet_id": self.fleet_id,
            "member": self.backend.member_token(),
            "region": settings.region,
            "regions": settings.regions,
            "backend": self.storage.name,
            "schemes": {name: pool_entry(pool) for name, pool in self.pools.items()},
            "peers": self.peer_status(),
        }

    def peer_status(self) -> dict[str, dict[str, Any]]:
        """Each peer's state: ``{"reachable": bool or null (not asked yet), "known": bool (a fleet document given,
        now or remembered), "problem": what was wrong last or null, "fleet_id", "overlaps": [schemes]}``."""
        return {
            peer: {
                "reachable": self.reachable[peer],
                "known": self.verdicts[peer] is not None,
                "problem": None if self.reachable[peer] else self.problem.get(peer),
                "fleet_id": self.seen.get(peer),
                "overlaps": sorted(self.verdicts[peer] or {}),
            }
            for peer in self.peers
        }

    # -- peers ---------------------------------------------------------------------------------------------
    def poke(self, asker: str | None) -> None:
        """A check arrived from fleet ``asker`` (its :data:`FLEET_HEADER`): run a round soon, when it is another
        fleet and the last round is more than :data:`POKE_MIN_INTERVAL_S` old."""
        if self.peers and asker and asker != self.fleet_id:
            if time.monotonic() - self._last_round >= POKE_MIN_INTERVAL_S:
                self._wake.set()

    async def run(self) -> None:
        """Background task: the fleet ID (read again with backoff, from :data:`FIRST_ROUND_RETRY_S` doubling up to
        the holders' ``BACKOFF_MAX_S``, while storage cannot tell it), the first round (peers that do not answer
        are asked again every :data:`FIRST_ROUND_RETRY_S` for up to ``peer_check_interval`` seconds, so fleets
        started together see each other before either issues), then a round every ``peer_check_interval`` seconds
        or when poked."""
        pause = FIRST_ROUND_RETRY_S
        while await self.read_fleet_id() is None:
            await asyncio.sleep(pause)
            pause = min(pause * 2, BACKOFF_MAX_S)
        if not self.peers:
            return
        await self.recall()
        import httpx

        async with httpx.AsyncClient(timeout=PEER_TIMEOUT_S, follow_redirects=True, max_redirects=3) as client:
            pending = list(self.peers)
            deadline = time.monotonic() + self.settings.peer_check_interval
            while pending:
                answered = await asyncio.gather(*(self._check(client, peer) for peer in pending))
                pending = [peer for peer, ok in zip(pending, answered, strict=True) if not ok]
                if time.monotonic() >= deadline:
                    break
                await asyncio.sleep(FIRST_ROUND_RETRY_S)
            self._first_round_done = True
            self._apply()
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.peer_check_interval):
                        await self._wake.wait()
                self._wake.clear()
                self._last_round = time.monotonic()
                try:
                    await self.check_round(client)
                except Exception:  # the guard must outlive any one failure
                    log.exception("peer fleet check failed unexpectedly")

    async def check_round(self, client: httpx.AsyncClient) -> None:
        """Ask every peer once (concurrently) and apply the verdicts."""
        await asyncio.gather(*(self._check(client, peer) for peer in self.peers))
        self._apply()

    async def _check(self, client: httpx.AsyncClient, peer: str) -> bool:
        """Ask ``peer`` and record its verdict (and remember its document); False when it gave none (its last
        verdict, or the one its remembered document gives, stands)."""
        assert self.fleet_id is not None
        answer = await self._ask(client, peer, self.fleet_id)
        if self.metrics is not None:
            self.metrics.peer_fleet_up(peer, answer is not None)
        if answer is None:
            return False
        judged = await self._compare(peer, answer)
        if judged is None:
            return False
        self.verdicts[peer], same = judged
        await self._remember(peer, answer, same)
        return True

    # -- what we remember of peers (fleet records) ------------------------------------------------------
    @staticmethod
    def record_name(peer: str) -> str:
        return PEER_RECORD.format(digest=hashlib.sha256(peer.encode()).hexdigest()[:24])

    async def recall(self) -> None:
        """Judge every peer by the document remembered in storage (its verdict until it answers). A storage that
        cannot be read now leaves the peers unknown (fail closed), logged."""
        for peer in self.peers:
            try:
                async with asyncio.timeout(PEER_TIMEOUT_S):
                    stored = await self.backend.read_record(self.record_name(peer))
            except (NotReadyError, TimeoutError) as exc:
                log.warning("peer fleet %s: its last document cannot be read from storage: %s", peer, _why(exc))
                continue
            self.remembered[peer] = stored
            document = valid_document(stored.get("document")) if stored is not None else None
            if stored is None or document is None or stored.get("url") != peer:
                continue
            same = stored.get("same_fleet") is True
            self.verdicts[peer] = {} if same else self._overlaps(peer, document, copied=False)
            self.seen.setdefault(peer, document["fleet_id"])
            log.info("peer fleet %s: judged by its last document (fleet %s) until it answers", peer,
                     document["fleet_id"])  # fmt: skip

    async def _remember(self, peer: str, answer: dict[str, Any], same: bool) -> None:
        """Store ``answer`` as ``peer``'s last document when it differs from the one stored. Never raises."""
        document = {key: answer[key] for key in ("fleet_id", "region", "regions", "schemes")}
        value = {"url": peer, "same_fleet": same, "document": document}
        before = self.remembered.get(peer)
        if before == value:
            return
        name = self.record_name(peer)
        try:
            async with asyncio.timeout(PEER_TIMEOUT_S):
                if not await self.backend.swap_record(name, before, value):
                    before = await self.backend.read_record(name)  # another replica of ours wrote it
                    if before != value and not await self.backend.swap_record(name, before, value):
                        return
        except (NotReadyError, TimeoutError) as exc:
            log.warning("peer fleet %s: its document could not be remembered in storage: %s", peer, _why(exc))
            return
        self.remembered[peer] = value

    async def _ask(self, client: httpx.AsyncClient, peer: str, fleet_id: str) -> dict[str, Any] | None:
        """The peer's ``/v1/fleet`` document, or None (logged when that changes) when it gives none in time."""
        import httpx

        try:
            async with asyncio.timeout(PEER_TIMEOUT_S):
                async with client.stream("GET", f"{peer}/v1/fleet", headers={FLEET_HEADER: fleet_id}) as response:
                    response.raise_for_status()
                    body = b""
                    async for piece in response.aiter_bytes():
                        body += piece
                        if len(body) > PEER_DOCUMENT_MAX_BYTES:
                            raise ValueError(f"a fleet document over {PEER_DOCUMENT_MAX_BYTES} bytes")
            answer = valid_document(json.loads(body))
            if answer is None:
                raise ValueError("not a well-formed /v1/fleet document with a fleet ID")
        except (httpx.HTTPError, ValueError, TimeoutError) as exc:
            why = _problem(exc)
            if self.reachable[peer] is not False or self.problem.get(peer) != why:
                known = "its last known document stands" if self.verdicts[peer] is not None else "never known"
                log.warning("peer fleet %s gave no fleet document (%s); %s", peer, why, known)
            self.reachable[peer] = False
            self.problem[peer] = why
            return None
        if self.reachable[peer] is not True:
            log.info("peer fleet %s answers: fleet %s, region %s of %s", peer, answer["fleet_id"],
                     answer["region"], answer["regions"])  # fmt: skip
        self.reachable[peer] = True
        self.seen[peer] = answer["fleet_id"]
        return answer

    async def _compare(self, peer: str, answer: dict[str, Any]) -> tuple[dict[str, str], bool] | None:
        """({scheme: reason} for every scheme whose pool overlaps the peer's, whether it is a node of our own
        fleet): ({}, True) for a peer of our own fleet (its member token live in our backend); None when that
        cannot be told now (the last verdict stands)."""
        copied = False
        if answer["fleet_id"] == self.fleet_id:
            member = answer.get("member")
            same = await self.backend.has_member(member) if member else None
            if same is None:  # no member token (no lease now) or our backend cannot tell: decide nothing
                return None
            if same:
                return {}, True
            copied = True
        return self._overlaps(peer, answer, copied), False

    def _overlaps(self, peer: str, answer: dict[str, Any], copied: bool) -> dict[str, str]:
        """{scheme: reason} for every scheme whose pool overlaps the one in ``answer`` (a fleet document of
        ``peer``; ``copied``: it shows our fleet ID but is not on our backend)."""
        if copied:
            copied_words = (
                f" (it shows our fleet ID {self.fleet_id} but is not on our backend: a copied state directory or a "
                "restored etcd snapshot; delete the fleet ID in one of them, fleet.json or <namespace>idmint/fleet)"
            )
        else:
            copied_words = ""
        found: dict[str, str] = {}
        for name, pool in self.pools.items():
            ours, theirs = pool_entry(pool), answer["schemes"].get(name)
            if theirs is None or not overlap(ours, theirs):
                continue
            layouts = f" {pool.group!r} and {theirs['group']!r}" if ours["group"] != theirs["group"] else ""
            found[name] = (
                f"{pool.kind}s {ours['pool'][0]}..{ours['pool'][1]}{layouts} (region {self.settings.region} of "
                f"{self.settings.regions}) overlap {theirs['pool'][0]}..{theirs['pool'][1]} of fleet "
                f"{answer['fleet_id']} at {peer} (region {answer['region']} of {answer['regions']}){copied_words}: "
                "both could issue the same IDs; give each fleet its own IDMINT_REGION"
                + ("" if not layouts else ", and both the same layout")
            )
        return found

    def _apply(self) -> None:
        blocked: dict[str, str] = {}
        for peer in self.peers:
            for scheme, reason in (self.verdicts[peer] or {}).items():
                blocked.setdefault(scheme, reason)
        unknown = [peer for peer in self.peers if self.verdicts[peer] is None]
        for scheme in self.pools:
            verdict = blocked.get(scheme)
            if verdict is None and unknown:
                if not self._first_round_done:
                    continue
                verdict = self._unknown_reason(unknown)
            self.block(scheme, verdict)

    def _unknown_reason(self, unknown: list[str]) -> str:
        """Why the guarded schemes wait for peers that never gave a fleet document."""
        named = "; ".join(f"{peer} ({self.problem.get(peer, 'not asked yet')})" for peer in unknown)
        return (
            f"peer fleet {named} has never answered with a fleet document, so whether its identities overlap ours "
            "is unknown: not issuing until it does (check IDMINT_PEER_FLEETS: the URL of an idmint server of that "
            "fleet, which must be running)"
        )


def _problem(exc: Exception) -> str:
    """What was wrong with a peer's answer, in words (refused, HTTP 404, not a fleet document, no answer)."""
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        return f"it answered HTTP {exc.response.status_code}"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect: {exc}" if str(exc) else "cannot connect"
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return f"no answer within {PEER_TIMEOUT_S:g} s"
    if isinstance(exc, ValueError):
        return f"not a fleet document: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _why(exc: Exception) -> str:
    return exc.reason if isinstance(exc, NotReadyError) else f"no answer within {PEER_TIMEOUT_S:g} s"


def pool_entry(pool: IdentityPool) -> dict[str, Any]:
    """A scheme's member of ``/v1/fleet`` ``schemes``: what :func:`overlap` compares."""
    return {
        "kind": pool.kind,
        "slice": list(pool.slice),
        "pool": list(pool.drawn_from),
        "group": pool.group,
        "group_in_id": pool.group_in_id,
    }
