"""The fleet check shared by both clients (no I/O): servers of two fleets whose identities overlap are refused.

Before a client uses a server, it reads the server's ``GET /v1/fleet`` (``{"fleet_id", "region", "regions",
"backend", "schemes": {name: {"kind", "slice", "pool", "group", "group_in_id"}}}``). Servers of one fleet (the same
``fleet_id``: a shared etcd namespace, or a shared state directory) are one ID space and work together. Servers of
two fleets are fine when every leased identity pool they share a scheme in is disjoint (their regions differ), and
an error otherwise: handing out IDs from both could repeat IDs. A server without the route (404: an idmint from
before fleets) is used as before.

The overlap rule is the server's (``app/fleet.py``, ``overlap``): two pools of one scheme overlap when their
identity ranges intersect and their groups are equal or not carried in the ID.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from idmint_client._exceptions import FleetOverlap

NOT_SERVED = object()
"""The fleet document of a server without ``/v1/fleet`` (404)."""


def overlap(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """Whether two fleets' entries for one scheme can issue the same ID (see the module docstring)."""
    if ours.get("group_in_id") and theirs.get("group_in_id") and ours.get("group") != theirs.get("group"):
        return False
    (a_low, a_high), (b_low, b_high) = ours["pool"], theirs["pool"]
    return bool(a_low <= b_high and b_low <= a_high)


class FleetCheck:
    """What this client has read of each server's fleet. :meth:`learn` raises FleetOverlap; :meth:`unread` names
    the servers still to be read before use."""

    def __init__(self) -> None:
        self.documents: dict[str, Any] = {}
        """Base URL -> its ``/v1/fleet`` document (a dict), or :data:`NOT_SERVED`."""

    def unread(self, urls: list[str]) -> list[str]:
        return [url for url in urls if url not in self.documents]

    def learn(self, url: str, response: httpx.Response) -> None:
        """Record ``url``'s answer to ``GET /v1/fleet``. Raises FleetOverlap naming both servers and the scheme
        when its fleet overlaps a fleet read before, ValueError for an answer that is not a fleet document (the
        caller fails the server over)."""
        if response.status_code == 404:
            self.documents[url] = NOT_SERVED
            return
        response.raise_for_status()
        doc = response.json()
        if not isinstance(doc, dict) or not isinstance(doc.get("schemes"), dict) or not doc.get("fleet_id"):
            raise ValueError("not a /v1/fleet document with a fleet ID")
        for other_url, other in self.documents.items():
            if other is NOT_SERVED or other["fleet_id"] == doc["fleet_id"]:
                continue
            for scheme, entry in doc["schemes"].items():
                theirs = other["schemes"].get(scheme)
                if isinstance(theirs, dict) and overlap(entry, theirs):
                    raise FleetOverlap(url, other_url, scheme, doc, other)
        self.documents[url] = doc
