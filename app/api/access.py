"""What each route declares about itself, where it is declared: the API-key scope it needs, whether it hands
out IDs, and whether it takes a request body.

A route passes ``openapi_extra=declare(...)`` (FastAPI's ``add_api_route``/``@router.get``); the declaration is
OpenAPI members of the operation (``x-idmint-scope``, ``x-idmint-hands-out-ids``, and the standard
``requestBody`` of a route that reads one), so the document clients read says the same as what the server enforces.
:class:`~app.api.front.Front`, the one ASGI layer in front of the app, reads them back (:func:`access_of`) for every
route, hot routes included (a hot route takes the declaration of the FastAPI route with its method and template),
and applies them: the key's scope and quotas (:mod:`app.api.auth`), the IDs charged to it, the drain
(:mod:`app.api.admin`), ``Cache-Control: no-store`` on every answer of a route that hands out IDs, and the refusal
of a body sent to a route that takes none. A route that declares nothing is open to everyone and takes no body
(health, readiness, the catalogue, the OpenAPI documents, static files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.settings import SCOPES

SCOPE_KEY = "x-idmint-scope"
"""OpenAPI extension member: the API-key scope an operation needs (absent: open to everyone)."""
HANDS_OUT_KEY = "x-idmint-hands-out-ids"
"""OpenAPI extension member: true when an operation hands out IDs or sequence integers."""
BODY_KEY = "requestBody"
"""The OpenAPI member of an operation that reads a request body (an operation without one takes none)."""


@dataclass(frozen=True, slots=True)
class Access:
    """A route's declaration.

    * ``scope``: the API-key scope it needs (one of :data:`app.settings.SCOPES`), or None when open to everyone;
    * ``hands_out_ids``: it hands out IDs or sequence integers, so its count is charged to the key's
      ``ids_per_second`` and a draining node refuses it;
    * ``stream``: its answer is a stream, held against the key's ``concurrent_streams`` and paced as it is sent;
    * ``takes_body``: it reads a request body (its OpenAPI operation has a ``requestBody``); a body sent to a route
      that takes none is refused before the route acts.
    """

    scope: str | None = None
    hands_out_ids: bool = False
    stream: bool = False
    takes_body: bool = False


OPEN = Access()
"""The access of a route that declares nothing, and of a request that matches no route."""


def declare(scope: str, *, hands_out_ids: bool = False, stream: bool = False, **openapi: Any) -> dict[str, Any]:
    """``openapi_extra`` for a route that needs API-key ``scope`` (with any other OpenAPI members in ``openapi``).
    ``stream`` is a stream route (its scope is ``stream``). Raises ValueError for a scope not in SCOPES."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    extra = {**openapi, SCOPE_KEY: scope}
    if hands_out_ids:
        extra[HANDS_OUT_KEY] = True
    return extra


def access_of(route: Any) -> Access:
    """The :class:`Access` a route declared (:data:`OPEN` for one that declared nothing, or a mount). A route takes
    a body when its operation documents one: ``requestBody`` in its ``openapi_extra``, or a FastAPI body parameter."""
    extra = getattr(route, "openapi_extra", None) or {}
    scope = extra.get(SCOPE_KEY)
    takes_body = BODY_KEY in extra or getattr(route, "body_field", None) is not None
    if scope is None:
        return Access(takes_body=True) if takes_body else OPEN
    return Access(scope, bool(extra.get(HANDS_OUT_KEY)), scope == "stream", takes_body)
