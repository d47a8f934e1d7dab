"""The fleet check shared by both clients (no I/O): servers of two fleets whose identities overlap are refused.

Before a client uses a server, it reads the server's ``GET /v1/fleet`` (``{"fleet_id", "member", "region",
"regions", "backend", "schemes": {name: {"kind", "slice", "pool", "group", "group_in_id"}}}``), and reads it again
every :data:`FLEET_RECHECK_S` seconds (a URL behind a load balancer may reach another fleet later). Servers of one
fleet (the same ``fleet_id``, each confirming the other's ``member`` token through ``GET
/v1/fleet/members/{token}``: a shared etcd namespace, or a shared state directory) are one ID space and work
together. Servers of two fleets are fine when every leased identity pool they share a scheme in is disjoint (their
regions differ), and an error otherwise: handing out IDs from both could repeat IDs. A fleet ID copied with a state
directory or an etcd snapshot is told apart by the member check. A server without the route (404: an idmint from
before fleets) is used as before, and asked again after :data:`NOT_SERVED_RECHECK_S` seconds.

The overlap rule is the server's (``app/fleet.py``, ``overlap``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from idmint_client._exceptions import FleetOverlapError

NOT_SERVED = object()
"""The fleet document of a server without ``/v1/fleet`` (404)."""
FLEET_RECHECK_S = 60.0
"""A server's fleet document is read again after this many seconds."""
NOT_SERVED_RECHECK_S = 10.0
"""A server that answered 404 (no ``/v1/fleet``) is asked again after this many seconds (a proxy may have answered
for a server still starting)."""


def overlap(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """Whether two fleets' entries for one scheme may issue the same ID: groups carried in every ID keep them apart
    when they differ; different groups the ID does not carry (snowflake layouts) count as an overlap; otherwise the
    identity ranges decide."""
    in_id = ours.get("group_in_id") and theirs.get("group_in_id")
    if ours.get("group") != theirs.get("group"):
        return not in_id
    (a_low, a_high), (b_low, b_high) = ours["pool"], theirs["pool"]
    return bool(a_low <= b_high and b_low <= a_high)


def _document(response: httpx.Response) -> dict[str, Any]:
    """The fleet document of a 200 answer; ValueError (the caller fails the server over) for anything else."""
    response.raise_for_status()
    doc = response.json()
    try:
        uuid.UUID(str(doc["fleet_id"]))
        for entry in doc["schemes"].values():
            low, high = entry["pool"]
            if not (type(low) is int and type(high) is int):
                raise TypeError("pool bounds must be integers")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"not a /v1/fleet document with a fleet ID ({exc!r})") from None
    return doc  # type: ignore[no-any-return]


class FleetCheck:
    """What this client has read of each server's fleet. :meth:`unread` names the servers to read (again) before
    use; :meth:`learn` records an answer and raises FleetOverlapError."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.documents: dict[str, Any] = {}
        """Base URL -> its ``/v1/fleet`` document (a dict), or :data:`NOT_SERVED`."""
        self._read_at: dict[str, float] = {}
        self._clock = clock

    def unread(self, urls: list[str]) -> list[str]:
        """The servers of ``urls`` whose fleet is unknown or due to be read again."""
        now = self._clock()
        due = []
        for url in urls:
            doc = self.documents.get(url)
            ttl = NOT_SERVED_RECHECK_S if doc is NOT_SERVED else FLEET_RECHECK_S
            if doc is None or now - self._read_at[url] >= ttl:
                due.append(url)
        return due

    def same_fleet(self, url: str, response: httpx.Response) -> list[str]:
        """The other servers read before whose fleet ID is the one in ``response`` (theirs must confirm its member
        token); [] for an answer that is not a fleet document."""
        try:
            fleet_id = response.json().get("fleet_id") if response.status_code == 200 else None
        except (ValueError, AttributeError):
            return []
        return [
            other_url
            for other_url, doc in self.documents.items()
            if other_url != url and isinstance(doc, dict) and fleet_id is not None and doc["fleet_id"] == fleet_id
        ]

    def learn(self, url: str, response: httpx.Response, confirm: Callable[[str, str], bool | None]) -> None:
        """Record ``url``'s answer to ``GET /v1/fleet``. ``confirm(server, token)`` asks ``server`` whether
        ``token`` is a live member of its backend (None: it cannot tell). Raises FleetOverlapError naming both servers
        and the scheme when the fleet overlaps another read before, ValueError for an answer that is not a fleet
        document (the caller fails the server over)."""
        self.documents.pop(url, None)
        if response.status_code == 404:
            self.documents[url] = NOT_SERVED
            self._read_at[url] = self._clock()
            return
        doc = _document(response)
        for other_url, other in self.documents.items():
            if other is NOT_SERVED:
                continue
            if other["fleet_id"] == doc["fleet_id"]:
                token = doc.get("member")
                live = confirm(other_url, token) if isinstance(token, str) and token else None
                if live is not False:
                    continue  # one fleet (or the server cannot tell now: as before members existed)
            for scheme, entry in doc["schemes"].items():
                theirs = other["schemes"].get(scheme)
                if isinstance(theirs, dict) and overlap(entry, theirs):
                    raise FleetOverlapError(url, other_url, scheme, doc, other)
        self.documents[url] = doc
        self._read_at[url] = self._clock()


def member_path(url: str, token: str) -> str:
    """``GET`` URL asking server ``url`` whether member ``token`` is live in its backend."""
    return f"{url}/v1/fleet/members/{quote(token, safe='')}"


def member_live(response: httpx.Response) -> bool | None:
    """``live`` of a ``GET /v1/fleet/members/{token}`` answer (None for 404 or anything unreadable)."""
    if response.status_code != 200:
        return None
    try:
        live = response.json().get("live")
    except (ValueError, AttributeError):
        return None
    return live if isinstance(live, bool) else None
