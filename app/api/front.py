"""The one ASGI layer in front of the FastAPI app: body limit, API keys, drain, hot routes and request metrics.

Every HTTP request passes here once, in this order:

1. **Body limit.** A declared ``Content-Length`` over ``IDMINT_MAX_BODY_BYTES`` is answered 413 (``Connection:
   close``) before a byte of the body is read. A body sent without a length (chunked) is counted as FastAPI reads
   it (its ``max_body_size``), which answers 413 the same way.
2. **Route.** A request for a hot route (:class:`HotRoute`: issuing one batch, a sequence's ``next`` and
   ``range``) is matched from a short table by method, prefix and suffix; any other is matched against the FastAPI
   routes (:func:`route_finder`). Either way the route's :class:`~app.api.access.Access` is the one its FastAPI
   route declared (:func:`~app.api.access.access_of`): a hot route has a FastAPI twin of the same method and
   template, which documents it and serves what the hot handler declines.
3. **API keys** (when a key file is set): the route's scope and the key's quotas (:class:`~app.api.auth.ApiKeys`),
   401/403/429 otherwise; a route that hands out IDs charges its parsed count to the key
   (:func:`~app.api.auth.charge_ids`); a stream is held against the key's stream cap and paced as it is sent.
4. **Drain.** A route that hands out IDs is refused with 503 + Retry-After while the node drains, and counted in
   flight otherwise (:class:`~app.api.admin.Drain`).
5. **Answer**: the hot handler's, written here with pre-built headers (:func:`~app.api.errors.send_json`), or the
   FastAPI app's. Each request is counted once in ``idmint_requests_total`` and
   ``idmint_request_duration_seconds`` under its route template (``"unmatched"`` for none), and every answer
   carries ``X-Content-Type-Options: nosniff``.

Every refusal written here is the JSON ``{"detail": ...}`` of :func:`~app.api.errors.refusal`, the one shape of
every error idmint answers. The hot table exists for speed: FastAPI routing and dependency injection cost several
times a single ID's own work (``bench/bench_http.py`` measures the front against a bare ASGI app).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from starlette.routing import Match
from starlette.types import Message, Receive, Scope, Send

from app.api.access import OPEN, Access, access_of
from app.api.admin import DRAIN_RETRY_AFTER_S, DRAINING, Drain
from app.api.auth import ApiKeys, Refusal
from app.api.errors import body_too_large, error_parts, refusal, send_json
from app.errors import IdmintError

log = logging.getLogger("idmint.api")

UNMATCHED = "unmatched"
"""The route label of a request that matches no route (a bounded label)."""
INTERNAL_ERROR = b'{"detail": "internal error"}'
NOSNIFF = (b"x-content-type-options", b"nosniff")

Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]
"""A hot handler's answer: status, JSON body, extra headers."""
HotHandler = Callable[[str, Scope], Awaitable[Answer | None]]
"""``handler(param, scope)``: the answer to a request whose template parameter is ``param``, or None to let the
FastAPI route answer it (an unknown scheme, a request with a body). Raises IdmintError for a refusal."""


class HotRoute:
    """One row of the hot table: ``method`` and a ``template`` with one parameter segment (``/v1/ids/{scheme}``),
    answered by ``handler`` without FastAPI. Its access is its FastAPI twin's (set by :class:`Front`)."""

    __slots__ = ("method", "template", "handler", "prefix", "suffix", "access")

    def __init__(self, method: str, template: str, handler: HotHandler) -> None:
        prefix, brace, rest = template.partition("{")
        _, close, suffix = rest.partition("}")
        if not brace or not close or "{" in suffix:
            raise ValueError(f"a hot route's template has exactly one parameter, got {template!r}")
        self.method = method
        self.template = template
        self.handler = handler
        self.prefix = prefix
        self.suffix = suffix
        self.access = OPEN

    def param(self, method: str, path: str) -> str | None:
        """The template parameter of a request for this route (one non-empty path segment), or None."""
        if method != self.method or not path.startswith(self.prefix) or not path.endswith(self.suffix):
            return None
        end = len(path) - len(self.suffix)
        start = len(self.prefix)
        if end <= start:
            return None
        param = path[start:end]
        return None if "/" in param else param


def all_routes(routes: Any) -> Iterator[Any]:
    """Every route of a router's ``routes``, those of included routers in place (FastAPI wraps each
    ``include_router()`` in one route holding the ``original_router``)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from all_routes(included.routes)
        else:
            yield route


def route_finder(api: Any) -> Callable[[Scope], tuple[str, Access]]:
    """``find(scope)``: the template and declared access of the FastAPI route a request would reach
    (``("/v1/ids/{scheme}/stream", Access("stream", ...))``), or ``("unmatched", OPEN)``."""

    # Each route's literal head (its template up to the first parameter): a route is matched (a regex each, about
    # 1 µs) only when the path starts with its head, so a request tries one to three routes, not all of them (the
    # full walk cost 12 to 50 µs a request). Order is kept: the first route that matches wins, as in Starlette.
    routes = [(str(getattr(route, "path", "")).partition("{")[0], route) for route in all_routes(api.router.routes)]

    def route_of(scope: Scope) -> tuple[str, Access]:
        path = scope["path"]
        for head, route in routes:
            if path.startswith(head):
                match, _ = route.matches(scope)
                if match == Match.FULL:
                    return str(getattr(route, "path", UNMATCHED)), access_of(route)
        return UNMATCHED, OPEN

    return route_of


class Front:
    """The outermost ASGI app (see the module's docstring). ``.app`` is the FastAPI app.

    ``hot``: the hot table; ``keys``: the API keys (None: no key file, and no key work at all); ``metrics``: the
    app's :class:`~app.metrics.Metrics`. Raises ValueError when a hot route has no FastAPI twin."""

    def __init__(
        self,
        api: Any,
        hot: list[HotRoute],
        *,
        max_body_bytes: int,
        drain: Drain,
        metrics: Any,
        keys: ApiKeys | None = None,
    ) -> None:
        self.app = api
        self.limit = max_body_bytes
        self.drain = drain
        self.metrics = metrics
        self.keys = keys
        self.route_of = route_finder(api)
        declared = {
            (method, getattr(route, "path", None)): access_of(route)
            for route in all_routes(api.router.routes)
            for method in getattr(route, "methods", None) or ()
        }
        for route in hot:
            if (route.method, route.template) not in declared:
                raise ValueError(f"hot route {route.method} {route.template} has no FastAPI route to declare it")
            route.access = declared[(route.method, route.template)]
        self.hot = tuple(hot)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    break  # the server itself refuses a malformed length
                if declared > self.limit:
                    body, _ = refusal(body_too_large(self.limit))
                    # Connection: close -- the unread body must not be taken for the next request.
                    await self._refuse(scope, send, 413, body, [(b"connection", b"close")], start)
                    return
                break
        method, path = scope["method"], scope["path"]
        hot = param = None
        for route in self.hot:
            param = route.param(method, path)
            if param is not None:
                hot = route
                break
        if hot is not None:
            template, access = hot.template, hot.access
        else:
            template, access = self.route_of(scope)
        key = None
        keys = self.keys
        if keys is not None and access.scope is not None:
            try:
                key = keys.check(access, scope)
            except Refusal as refused:
                body, headers = refusal(refused.reason, refused.retry_after)
                if refused.status == 401:
                    headers.append((b"www-authenticate", b'Bearer realm="idmint"'))
                await self._refuse(scope, send, refused.status, body, headers, start, template)
                return
        drain = self.drain
        if access.hands_out_ids:
            if drain.draining:
                body, headers = refusal(DRAINING, DRAIN_RETRY_AFTER_S)
                await self._refuse(scope, send, 503, body, headers, start, template)
                return
            drain.enter()
        try:
            if hot is not None and param is not None:
                try:
                    answer = await hot.handler(param, scope)
                except IdmintError as exc:
                    answer = error_parts(exc)
                except Exception:  # a fault of ours: still JSON, still counted (the traceback goes to the log)
                    log.exception("%s %s failed", method, template)
                    answer = 500, INTERNAL_ERROR, []
                if answer is not None:
                    status, body, headers = answer
                    await send_json(send, status, body, headers)
                    self.metrics.request(template, method, status, time.perf_counter() - start)
                    return
            if key is not None and access.stream:
                assert keys is not None
                with keys.streaming(key):
                    await self._fastapi(scope, receive, keys.paced(key, send), start, template)
            else:
                await self._fastapi(scope, receive, send, start, template)
        finally:
            if access.hands_out_ids:
                drain.leave()

    async def _fastapi(self, scope: Scope, receive: Receive, send: Send, start: float, template: str) -> None:
        status = 500

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), NOSNIFF]  # every response: no MIME sniffing
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            route = scope.get("route")
            self.metrics.request(
                getattr(route, "path", None) or template, scope["method"], status, time.perf_counter() - start
            )

    async def _refuse(
        self,
        scope: Scope,
        send: Send,
        status: int,
        body: bytes,
        headers: list[tuple[bytes, bytes]],
        start: float,
        template: str | None = None,
    ) -> None:
        await send_json(send, status, body, headers)
        if template is None:
            template, _ = self.route_of(scope)
        self.metrics.request(template, scope["method"], status, time.perf_counter() - start)
