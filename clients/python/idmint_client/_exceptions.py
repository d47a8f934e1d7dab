"""The exception tree of the idmint client.

::

    IdmintClientError
    ├── RequestRejectedError       a replica answered 4xx (not 429): the request itself is wrong; never retried
    │   ├── ValidationError        (ValueError) 422: ``detail`` names the rule broken (count range, option, ID rule)
    │   ├── UnauthorizedError      401: the API key is missing or matches none
    │   ├── ForbiddenError         403: the API key lacks the route's scope
    │   ├── UnknownSchemeError     (LookupError) 404: no scheme of that name on the server
    │   ├── UnknownSequenceError   (LookupError) 404: no sequence of that name in the fleet's storage
    │   └── UnknownPublicIdError   (LookupError) 404 to ``reveal``: no public-ID key in force opens the text
    ├── NoReplicaAvailableError    every replica refused (503/429 + Retry-After), failed (5xx, a redirect, a broken,
    │                              truncated or repeating answer) or could not be reached; ``reasons`` maps each
    │                              replica URL to its reason
    ├── FleetOverlapError          two of the servers belong to fleets whose leased identities overlap: IDs from
    │                              both could repeat, so the client hands out none
    ├── SequenceStoresDifferError  a sequence call with servers of two fleets (each keeps its own sequences, whose
    │                              integers would repeat), or of a fleet that cannot be told
    └── ClientClosedError          the client was closed

The TypeScript and Go clients name each alike (``docs/clients.md``, "Errors").
Errors of httpx never leave the client: they are mapped here, in one place (the ``reason`` of a replica, or
``raise ... from exc``), so callers catch :class:`IdmintClientError` and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class IdmintClientError(Exception):
    """Base of every error the idmint client raises."""


class RequestRejectedError(IdmintClientError):
    """A replica rejected the request itself (HTTP 4xx other than 429): asking another replica would not help.

    ``status`` is the HTTP status, ``detail`` the server's ``detail`` text, ``url`` the request URL.
    """

    def __init__(self, status: int, detail: str, url: str) -> None:
        super().__init__(f"{status} from {url}: {detail}")
        self.status = status
        self.detail = detail
        self.url = url


class ValidationError(RequestRejectedError, ValueError):
    """HTTP 422: a count, format, option or ID breaks a rule; ``detail`` names it (``count must be in 1..100000``)."""


class UnknownSchemeError(RequestRejectedError, LookupError):
    """HTTP 404: the server has no scheme of that name."""


class UnknownSequenceError(RequestRejectedError, LookupError):
    """HTTP 404 to a sequence call: the fleet has no sequence of that name (create it first: ``POST /v1/sequences``
    or ``idmint sequence create``)."""


class UnknownPublicIdError(RequestRejectedError, LookupError):
    """HTTP 404 to :meth:`~idmint_client.Client.reveal`: no public-ID key in force on the server opens the text (not
    a public ID of this fleet, a mistyped one, or one of a key removed since)."""


class UnauthorizedError(RequestRejectedError):
    """HTTP 401: the API key is missing or matches none."""


class ForbiddenError(RequestRejectedError):
    """HTTP 403: the API key is valid but lacks the scope of the route called."""


class NoReplicaAvailableError(IdmintClientError):
    """Every replica refused or failed; nothing was issued by this call (streams: see ``delivered``).

    ``reasons`` maps each replica's base URL to why it was not used (``503 not ready: lease lost (Retry-After 2
    s)``, ``connection refused``, ``kept out for 1.4 s more after 503``). ``delivered`` is how many IDs a stream
    had already yielded when it gave up (0 for other calls).
    """

    def __init__(self, what: str, reasons: Mapping[str, str], delivered: int = 0) -> None:
        listed = "; ".join(f"{url}: {reason}" for url, reason in reasons.items())
        super().__init__(f"{what}: no replica available ({listed})")
        self.reasons = dict(reasons)
        self.delivered = delivered


class FleetOverlapError(IdmintClientError):
    """Two servers given to the client belong to different fleets whose identity pools overlap for ``scheme``
    (both could issue the same IDs). ``urls``: the two servers; ``fleets``: their ``/v1/fleet`` documents. Give
    each fleet its own ``IDMINT_REGION``, or give the client servers of one fleet."""

    def __init__(self, url: str, other_url: str, scheme: str, fleet: Any, other_fleet: Any) -> None:
        mine, theirs = fleet["schemes"][scheme], other_fleet["schemes"][scheme]
        super().__init__(
            f"{url} (fleet {fleet['fleet_id']}, region {fleet.get('region')} of {fleet.get('regions')}) and "
            f"{other_url} (fleet {other_fleet['fleet_id']}, region {other_fleet.get('region')} of "
            f"{other_fleet.get('regions')}) are two fleets whose {scheme} identities overlap ({mine.get('kind')} "
            f"{mine['pool'][0]}..{mine['pool'][1]} and {theirs['pool'][0]}..{theirs['pool'][1]}): IDs from both "
            "could repeat; give each fleet its own IDMINT_REGION, or use servers of one fleet"
        )
        self.urls = (url, other_url)
        self.scheme = scheme
        self.fleets = (fleet, other_fleet)


class SequenceStoresDifferError(IdmintClientError):
    """A sequence call on servers that do not share one fleet's storage: each fleet (an etcd namespace or a state
    directory) keeps its own sequences, so integers from both would repeat; none is handed out. ``urls``: the two
    servers (the second None when one server's fleet cannot be read: an idmint without ``/v1/fleet``); ``fleets``:
    their fleet IDs. Give the client servers of one fleet for sequences."""

    def __init__(self, url: str, fleet: str | None, other_url: str | None, other_fleet: str | None) -> None:
        if other_url is None:
            text = (
                f"{url} does not tell its fleet (no /v1/fleet): with several servers, sequence integers from it and "
                "the others could repeat; use servers that tell their fleet"
            )
        else:
            text = (
                f"{url} (fleet {fleet}) and {other_url} (fleet {other_fleet}) keep separate sequences: their integers "
                "would repeat; use servers of one fleet for sequences"
            )
        super().__init__(text)
        self.urls = (url, other_url)
        self.fleets = (fleet, other_fleet)


class ClientClosedError(IdmintClientError):
    """The client was closed; create a new one."""


DEPRECATED_NAMES = {
    "BadRequest": ValidationError,
    "UnknownScheme": UnknownSchemeError,
    "UnknownSequence": UnknownSequenceError,
    "Unauthorized": UnauthorizedError,
    "RequestRejected": RequestRejectedError,
    "NoReplicaAvailable": NoReplicaAvailableError,
    "FleetOverlap": FleetOverlapError,
    "SequenceStoresDiffer": SequenceStoresDifferError,
    "ClientClosed": ClientClosedError,
}
"""The earlier names, still importable from ``idmint_client`` (with a DeprecationWarning). ``Unauthorized`` was
401 and 403 both: it is now :class:`UnauthorizedError`, 401 only (catch :class:`ForbiddenError` for 403)."""
