"""Who this fleet is, and the guard that keeps it from sharing identities with another fleet.

A **fleet** is every node that shares one lease backend (one etcd namespace, or one embedded state directory):
inside it, the backend makes every claimed identity exclusive. Two fleets share nothing, so only their
configuration keeps them apart: regions (:mod:`app.pool`) give each fleet a disjoint slice of every leased identity
space. The guard here checks that configuration against the fleets it is told about:

* :meth:`FleetGuard.document` is ``GET /v1/fleet``: ``{"fleet_id", "member", "region", "regions", "backend",
  "schemes": {name: {"kind", "slice", "pool", "group", "group_in_id"}}, "peers": {url: {...}}}`` for every scheme
  whose uniqueness rests on a leased identity (and Muid when its medallion is static). ``member`` is a token of this
  process that only a node on the same backend can confirm (:meth:`~app.storage.lease.LeaseBackend.has_member`), so a
  fleet ID copied with a cloned state directory or a restored etcd snapshot is told apart from the real fleet.
* with ``IDMINT_PEER_FLEETS`` set, :meth:`FleetGuard.run` reads each peer's ``/v1/fleet`` at start and every
  ``IDMINT_PEER_CHECK_INTERVAL`` seconds. A peer of another fleet whose pool for a scheme overlaps ours
  (:func:`overlap`) makes that scheme not ready here (503 naming the peer and the scheme), until a later answer
  shows the overlap gone. Until the first round is over, the guarded schemes are not ready either; it asks a peer
  that does not answer again for up to one interval (fleets started together see each other before either
  issues), then goes on without it. A peer that cannot be reached, takes longer than :data:`PEER_TIMEOUT_S`, or
  answers anything but a well-formed fleet document decides nothing: its last verdict stands, and ``/v1/fleet``'s
  ``peers`` and ``/readyz`` show it unreachable.
* A check carries our fleet ID in the ``Idmint-Fleet`` request header; a node that sees another fleet's ID there
  runs its own round at once (at most once a second), so when both fleets list each other, the node that started
  first stops as soon as the second one asks, before that one issues anything. A fleet that does not list the
  other never asks, so each fleet must list the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from app.errors import NotReadyError
from app.identity import PEER_CHECK_PENDING

if TYPE_CHECKING:
    from app.pool import IdentityPool
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
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.backend = storage.leases
        self.pools = dict(pools)
        self.block = block
        self.peers = list(settings.peer_fleets)
        self.fleet_id: str | None = None
        self.verdicts: dict[str, dict[str, str]] = {peer: {} for peer in self.peers}
        """peer URL -> {scheme: reason} for the overlaps that peer's last answer showed."""
        self.reachable: dict[str, bool | None] = {peer: None for peer in self.peers}
        self.seen: dict[str, str] = {}
        """peer URL -> the fleet ID it last answered with."""
        self._wake = asyncio.Event()
        self._fleet_id_warned = False
        self._last_round = 0.0
        self._first_round_done = not self.peers
        if self.peers:
            for scheme in self.pools:
                self.block(scheme, f"{PEER_CHECK_PENDING} (IDMINT_PEER_FLEETS) before issuing")

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
        """Each peer's state: ``{"reachable": bool or null (not asked yet), "fleet_id", "overlaps": [schemes]}``."""
        return {
            peer: {
                "reachable": self.reachable[peer],
                "fleet_id": self.seen.get(peer),
                "overlaps": sorted(self.verdicts[peer]),
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
        """Background task: the first round (peers that do not answer are asked again every
        :data:`FIRST_ROUND_RETRY_S` for up to ``peer_check_interval`` seconds, so fleets started together see each
        other before either issues), then a round every ``peer_check_interval`` seconds or when poked."""
        while await self.read_fleet_id() is None:  # noqa: ASYNC110 -- polling the backend, not an event
            await asyncio.sleep(FIRST_ROUND_RETRY_S)
        if not self.peers:
            return
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
                except Exception:  # noqa: BLE001 -- the guard must outlive any one failure
                    log.exception("peer fleet check failed unexpectedly")

    async def check_round(self, client: httpx.AsyncClient) -> None:
        """Ask every peer once (concurrently) and apply the verdicts."""
        await asyncio.gather(*(self._check(client, peer) for peer in self.peers))
        self._apply()

    async def _check(self, client: httpx.AsyncClient, peer: str) -> bool:
        """Ask ``peer`` and record its verdict; False when it gave none (its last verdict stands)."""
        assert self.fleet_id is not None
        answer = await self._ask(client, peer, self.fleet_id)
        if answer is None:
            return False
        verdict = await self._compare(peer, answer)
        if verdict is None:
            return False
        self.verdicts[peer] = verdict
        return True

    async def _ask(self, client: httpx.AsyncClient, peer: str, fleet_id: str) -> dict[str, Any] | None:
        """The peer's ``/v1/fleet`` document, or None (logged when that changes) when it gives none in time."""
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
            if self.reachable[peer] is not False:
                why = exc if str(exc) else f"no answer within {PEER_TIMEOUT_S:g} s"
                log.warning("peer fleet %s gave no fleet document (%s); its last verdict stands", peer, why)
            self.reachable[peer] = False
            return None
        if self.reachable[peer] is not True:
            log.info("peer fleet %s answers: fleet %s, region %s of %s", peer, answer["fleet_id"],
                     answer["region"], answer["regions"])  # fmt: skip
        self.reachable[peer] = True
        self.seen[peer] = answer["fleet_id"]
        return answer

    async def _compare(self, peer: str, answer: dict[str, Any]) -> dict[str, str] | None:
        """{scheme: reason} for every scheme whose pool overlaps the peer's; {} for a peer of our own fleet (its
        member token live in our backend); None when that cannot be told now (the last verdict stands)."""
        copied = ""
        if answer["fleet_id"] == self.fleet_id:
            member = answer.get("member")
            same = await self.backend.has_member(member) if member else None
            if same is None:  # no member token (no lease now) or our backend cannot tell: decide nothing
                return None
            if same:
                return {}
            copied = (
                f" (it shows our fleet ID {self.fleet_id} but is not on our backend: a copied state directory or a "
                "restored etcd snapshot; delete the fleet ID in one of them, fleet.json or <namespace>idmint/fleet)"
            )
        found: dict[str, str] = {}
        for name, pool in self.pools.items():
            ours, theirs = pool_entry(pool), answer["schemes"].get(name)
            if theirs is None or not overlap(ours, theirs):
                continue
            layouts = f" {pool.group!r} and {theirs['group']!r}" if ours["group"] != theirs["group"] else ""
            found[name] = (
                f"{pool.kind}s {ours['pool'][0]}..{ours['pool'][1]}{layouts} (region {self.settings.region} of "
                f"{self.settings.regions}) overlap {theirs['pool'][0]}..{theirs['pool'][1]} of fleet "
                f"{answer['fleet_id']} at {peer} (region {answer['region']} of {answer['regions']}){copied}: both "
                "could issue the same IDs; give each fleet its own IDMINT_REGION"
                + ("" if not layouts else ", and both the same layout")
            )
        return found

    def _apply(self) -> None:
        blocked: dict[str, str] = {}
        for peer in self.peers:
            for scheme, reason in self.verdicts[peer].items():
                blocked.setdefault(scheme, reason)
        for scheme in self.pools:
            verdict = blocked.get(scheme)
            if verdict is None and not self._first_round_done:
                continue
            self.block(scheme, verdict)


def pool_entry(pool: IdentityPool) -> dict[str, Any]:
    """A scheme's member of ``/v1/fleet`` ``schemes``: what :func:`overlap` compares."""
    return {
        "kind": pool.kind,
        "slice": list(pool.slice),
        "pool": list(pool.drawn_from),
        "group": pool.group,
        "group_in_id": pool.group_in_id,
    }
