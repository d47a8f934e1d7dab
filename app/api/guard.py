"""The outermost ASGI layer: request bodies over ``IDMINT_MAX_BODY_BYTES`` are refused before anything reads them.

A request that declares a larger ``Content-Length`` is answered 413 here, without calling the app and without
reading a byte of its body. A body sent without a length (chunked) is counted as the app reads it, by FastAPI's
own ``max_body_size`` (Starlette's ``RequestBodyLimitMiddleware``), which stops reading at the limit and answers
413 the same way. Both answers are JSON ``{"detail": ...}`` naming the limit, and both are counted in the request
metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import body_too_large, refusal, send_json

UNMATCHED = "unmatched"


def route_finder(api: Any) -> Callable[[Scope], str]:
    """``route_of(scope)``: the template of the FastAPI route a request would reach (``/v1/ids/{scheme}``), or
    ``"unmatched"``: the bounded route label for requests answered before routing."""

    def find(routes: Any, scope: Scope) -> str | None:
        for candidate in routes:
            included = getattr(candidate, "original_router", None)  # FastAPI wraps each include_router()
            if included is not None:
                found = find(included.routes, scope)
                if found is not None:
                    return found
                continue
            match, _ = candidate.matches(scope)
            if match == Match.FULL:
                return str(getattr(candidate, "path", UNMATCHED))
        return None

    def route_of(scope: Scope) -> str:
        route = scope.get("route")
        if route is not None:
            return str(getattr(route, "path", UNMATCHED))
        return find(api.router.routes, scope) or UNMATCHED

    return route_of


class BodyLimit:
    """ASGI middleware: 413 for a declared ``Content-Length`` over ``limit`` bytes, before the body is read.

    ``.app`` is the FastAPI app (as on every idmint wrapper); requests go on to ``next_app``.
    """

    def __init__(self, next_app: ASGIApp, api: Any, limit: int, metrics: Any, route_of: Callable[[Scope], str]) -> None:
        self.next = next_app
        self.app = api
        self.limit = limit
        self.metrics = metrics
        self.route_of = route_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"content-length":
                    try:
                        declared = int(value)
                    except ValueError:
                        break  # the server itself refuses a malformed length
                    if declared > self.limit:
                        await self._refuse(scope, send)
                        return
                    break
        await self.next(scope, receive, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        start = time.perf_counter()
        body, _ = refusal(body_too_large(self.limit))
        # Connection: close -- the unread body must not be taken for the next request on this connection.
        await send_json(send, 413, body, [(b"connection", b"close")])
        self.metrics.request(self.route_of(scope), scope["method"], 413, time.perf_counter() - start)
