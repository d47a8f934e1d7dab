"""The one ASGI layer in front of the FastAPI app: request framing, body rules, API keys, drain, hot routes,
request metrics and the headers every answer carries.

Every HTTP request passes here once, in this order:

1. **Route.** A request for a hot route (:class:`HotRoute`: issuing one batch, a sequence's ``next`` and
   ``range``) is matched from a short table by method, prefix and suffix (:meth:`Front.hot_route`); any other is
   matched against the FastAPI routes (:func:`route_finder`). Either way the route's :class:`~app.api.access.Access`
   is the one its FastAPI route declared (:func:`~app.api.access.access_of`): a hot route has a FastAPI twin of the
   same method and template, which documents it and serves the hot route's other methods (POST issue, POST next).
2. **Framing** (:func:`framing_refusal`): an HTTP/1.1 request without ``Host``, or any with two, is a 400, an HTTP
   version other than 1.0 and 1.1 (or an ASGI server's 2 and 3) a 505, an ``Expect`` other than ``100-continue`` a
   417, a ``Transfer-Encoding`` other than ``chunked`` a 501.
3. **Body.** A declared ``Content-Length`` over ``IDMINT_MAX_BODY_BYTES`` is a 413 before a byte of the body is
   read. A body sent to a route that takes none (its operation documents no ``requestBody``) is refused before the
   route acts: a 422 naming the rule, a 413 past the limit; one sent without a length (chunked) is read, counted
   and dropped up to the limit first (an empty one passes). A body sent without a length to a route that takes one
   is counted as FastAPI reads it (its ``max_body_size``), which answers 413. Each of these answers says
   ``Connection: close`` (the rest of the body is not read); ``idmint serve``'s connection layer then reads and
   drops what the client still sends for a while before closing (:mod:`app.serving`), so a client that writes its
   whole body before reading still reads the answer.
4. **API keys** (when a key file is set): the route's scope and the key's quotas (:class:`~app.api.auth.ApiKeys`),
   401/403/429 otherwise; a route that hands out IDs gives the issuing core its request's charge
   (:func:`~app.api.auth.ids_charge`), which the core calls with the parsed count before it takes any; a stream
   is held against the key's stream cap and paced as it is sent.
5. **Drain.** A route that hands out IDs is refused with 503 + Retry-After while the node drains, and counted in
   flight otherwise (:class:`~app.api.admin.Drain`); a hot answer only while it waits (one answered at once runs
   without the event loop turning, so no drain can see it under way).
6. **HEAD** of a route that has a GET is that GET's answer without its body: the GET is run, and its body dropped;
   for a route that hands out IDs, nothing is issued or charged: the key check and the drain answer, else a 200
   with the headers of the route's JSON answer and no ``Content-Length`` (the length of IDs not issued).
7. **Answer**: a hot route's from :meth:`Front.answer_hot` (steps 4 and 5, the route's handler, the count in the
   metrics), or the FastAPI app's. ``idmint serve``'s connection layer calls the same :meth:`Front.answer_hot` for
   a simple GET of a hot route (no body, no ``Expect``, nothing unfinished before it) and writes its
   :data:`Reply` itself; any other request reaches this layer through ASGI. Each request is counted once in
   ``idmint_requests_total`` and ``idmint_request_duration_seconds`` under its route template (``"unmatched"`` for
   none). Every answer carries ``X-Content-Type-Options: nosniff``, and every answer of a route that hands out IDs
   ``Cache-Control: no-store`` (a cache or proxy that replays one would hand the same IDs out twice): both are
   added here and nowhere else. With ``IDMINT_CORS_ORIGINS`` set, a request whose ``Origin`` is listed gets the
   CORS headers on every answer (the hot path's too: :meth:`Front.answer_hot` adds them), and its preflight
   (``OPTIONS`` with ``Access-Control-Request-Method``) is answered 204 here, before any other rule; a preflight
   from an origin not listed is a 403 naming the setting.

Every refusal written here is the JSON ``{"detail": ...}`` of :func:`~app.api.errors.refusal`, the one shape of
every error idmint answers. The hot table exists for speed: FastAPI routing and dependency injection cost several
times a single ID's own work (``bench/bench_http.py`` measures the front against a bare ASGI app).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any

from starlette.routing import Match
from starlette.types import Message, Receive, Scope, Send

from app.api.access import OPEN, Access, access_of
from app.api.admin import DRAIN_RETRY_AFTER_S, DRAINING, Drain
from app.api.auth import SCAN, UNSETTLED_KEY, ApiKeys, KeyState, Refusal, settle
from app.api.errors import body_too_large, error_parts, refusal
from app.api.streams import MEDIA_TYPE as STREAM_MEDIA_TYPE
from app.errors import IdmintError

log = logging.getLogger("idmint.api")

UNMATCHED = "unmatched"
"""The route label of a request that matches no route (a bounded label)."""
INTERNAL_ERROR = b'{"detail": "internal error"}'

Header = tuple[bytes, bytes]
NOSNIFF: Header = (b"x-content-type-options", b"nosniff")
NO_STORE: Header = (b"cache-control", b"no-store")
CLOSE: Header = (b"connection", b"close")
JSON_HEADERS: tuple[Header, ...] = ((b"content-type", b"application/json"), NOSNIFF)
"""The first headers of every JSON answer this layer writes."""
JSON_HEADERS_NO_STORE: tuple[Header, ...] = (*JSON_HEADERS, NO_STORE)
"""The first headers of every JSON answer this layer writes for a route that hands out IDs."""

VARY_ORIGIN: Header = (b"vary", b"origin")
CORS_EXPOSE: Header = (b"access-control-expose-headers", b"retry-after")
PREFLIGHT_HEADERS: tuple[Header, ...] = (
    (b"access-control-allow-methods", b"GET, POST"),
    (b"access-control-allow-headers", b"authorization, content-type"),
    (b"access-control-max-age", b"600"),
)
"""A preflight's answer for a listed origin: the API's methods, and the API key's header (``Authorization``)."""

HTTP_VERSIONS = frozenset({"1.0", "1.1", "2", "3"})
"""The ``http_version`` values of a scope this layer serves: HTTP/1.0 and 1.1, and the ASGI spellings of HTTP/2 and
HTTP/3 (an ASGI server speaking those). ``HTTP/2.0`` in an HTTP/1 request line (uvicorn's httptools parser reads it
as ``"2.0"``) is not HTTP/2: a 505."""
CONTINUE = b"100-continue"
CHUNKED = b"chunked"

Answer = tuple[int, bytes, list[Header]]
"""A hot handler's answer: status, JSON body, extra headers."""
HotHandler = Callable[[str, Scope], Answer | Awaitable[Answer]]
"""``handler(param, scope)``: the answer to a request whose template parameter is ``param``, or (when it must wait)
an awaitable of it (an ``async def`` handler is one). Raises IdmintError for a refusal (an unknown scheme is
UnknownSchemeError, a 404), at once or from the awaitable. ``scope`` holds at least ``method``, ``path``,
``query_string`` and ``headers``.

``idmint serve`` runs a hot handler's first steps inside the connection's read callback, not in a task, until its
first real wait (then a task carries it on): before that wait it must not use what needs a current task
(``asyncio.timeout``, a ``TaskGroup``); wrap such work in a task of its own (``create_task``, ``gather``,
``shield``), as the node's mark writes and the sequences' reservations are."""
Reply = tuple[int, tuple[Header, ...], list[Header], bytes]
"""A whole JSON answer as this layer writes it: status, the fixed first headers (:data:`JSON_HEADERS` or
:data:`JSON_HEADERS_NO_STORE`, constants), the extra headers, the body. Its headers in order are
:func:`reply_headers`; ``Content-Length`` comes last."""


def reply_headers(reply: Reply) -> list[Header]:
    """Every header of ``reply``, in the order written: the fixed ones, the extra ones, ``content-length``."""
    _, fixed, extra, body = reply
    return [*fixed, *extra, (b"content-length", b"%d" % len(body))]


async def send_reply(send: Send, reply: Reply) -> None:
    """Write ``reply`` on a raw ASGI ``send`` (the connection layer writes the same headers itself,
    :mod:`app.serving`)."""
    await send({"type": "http.response.start", "status": reply[0], "headers": reply_headers(reply)})
    await send({"type": "http.response.body", "body": reply[3]})


def framing_refusal(
    version: str, host: bytes | None, expect: bytes | None, hosts: int = 1, coding: bytes | None = None
) -> Answer | None:
    """The refusal of a request by its framing, or None: an HTTP ``version`` this server does not speak (505), an
    HTTP/1.1 request without ``host`` or any request with ``hosts`` > 1 Host fields (400, RFC 9112 section 3.2), an
    ``expect`` other than ``100-continue`` (417, RFC 9110 section 10.1.1: the only expectation defined), a
    Transfer-Encoding ``coding`` other than ``chunked`` (501, RFC 9112 section 6.1: the only one read here). Each
    closes the connection."""
    if version not in HTTP_VERSIONS:
        body, headers = refusal(f"HTTP/{version} is not supported: this server speaks HTTP/1.1 (and HTTP/1.0)")
        return 505, body, [*headers, CLOSE]
    if host is None and version == "1.1":
        body, headers = refusal("an HTTP/1.1 request must carry a Host header (RFC 9112 section 3.2)")
        return 400, body, [*headers, CLOSE]
    if hosts > 1:
        body, headers = refusal(f"a request must carry one Host header, got {hosts} (RFC 9112 section 3.2)")
        return 400, body, [*headers, CLOSE]
    if coding is not None and coding.strip().lower() != CHUNKED:
        shown = coding.decode("latin-1")
        body, headers = refusal(
            f"Transfer-Encoding must be chunked (the only transfer coding read here), got {shown!r}"
        )
        return 501, body, [*headers, CLOSE]
    if expect is not None and expect.lower() != CONTINUE:
        shown = expect.decode("latin-1")
        body, headers = refusal(f"Expect must be 100-continue (the only expectation HTTP defines), got {shown!r}")
        return 417, body, [*headers, CLOSE]
    return None


def framing_fields(headers: Iterable[Header]) -> tuple[bytes | None, bytes | None, int, bytes | None, bytes | None]:
    """(Host, Expect, how many Host fields, the Transfer-Encoding codings joined by commas, Content-Length) of request
    ``headers`` (lowercase names), None where absent: what :func:`framing_refusal` and the body checks read."""
    host = expect = coding = length = None
    hosts = 0
    for name, value in headers:
        if name == b"host":
            host = value
            hosts += 1
        elif name == b"content-length":
            length = value
        elif name == b"transfer-encoding":
            coding = value if coding is None else coding + b"," + value
        elif name == b"expect":
            expect = value
    return host, expect, hosts, coding, length


def refused_by_framing(version: str, headers: list[Header]) -> bool:
    """Whether :func:`framing_refusal` refuses a request of HTTP ``version`` with ``headers`` (lowercase names): its
    answer then comes before, and without, any byte of its body (the connection layer asks, :mod:`app.serving`)."""
    host, expect, hosts, coding, _ = framing_fields(headers)
    return framing_refusal(version, host, expect, hosts, coding) is not None


def headless(send: Send) -> Send:
    """``send`` with every body dropped (the answer to HEAD: its GET's headers, ``Content-Length`` too)."""

    async def head_send(message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            message = {**message, "body": b""}
        await send(message)

    return head_send


def takes_no_body(limit: int, size: int) -> Answer:
    """The refusal of a ``size``-byte body sent to a route that takes none: 413 past ``limit``, else 422."""
    if size > limit:
        body, headers = refusal(body_too_large(limit))
        return 413, body, [*headers, CLOSE]
    body, headers = refusal("this route takes no request body (its parameters, if any, go in the query)")
    return 422, body, [*headers, CLOSE]


class HotRoute:
    """One row of the hot table: ``method`` and a ``template`` with one parameter segment (``/v1/ids/{scheme}``),
    answered by ``handler`` without FastAPI. Its access is its FastAPI twin's (set by :class:`Front`)."""

    __slots__ = ("method", "template", "handler", "prefix", "suffix", "access", "fixed")

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
        self.fixed = JSON_HEADERS
        """The fixed first headers of its answers (:data:`JSON_HEADERS_NO_STORE` when it hands out IDs)."""

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
    app's :class:`~app.metrics.Metrics`; ``cors_origins``: the origins answered with CORS headers. Raises
    ValueError when a hot route has no FastAPI twin."""

    def __init__(
        self,
        api: Any,
        hot: list[HotRoute],
        *,
        max_body_bytes: int,
        drain: Drain,
        metrics: Any,
        keys: ApiKeys | None = None,
        cors_origins: Iterable[str] = (),
    ) -> None:
        self.app = api
        self.cors = frozenset(origin.lower().encode("latin-1") for origin in cors_origins)
        """The origins whose browser pages may call the API (``IDMINT_CORS_ORIGINS``): empty, no CORS work."""
        self.limit = max_body_bytes
        self.drain = drain
        self.metrics = metrics
        self.record_hot = metrics.request_recorder()
        """:meth:`~app.metrics.Metrics.request` for a hot route's answer (its method is GET or POST)."""
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
            route.fixed = JSON_HEADERS_NO_STORE if route.access.hands_out_ids else JSON_HEADERS
        self.hot = tuple(hot)
        self.hot_targets: dict[bytes, Any] = {}
        """The connection layer's memo of request targets (:mod:`app.serving`): raw target -> its hot route."""

    def hot_route(self, method: str, path: str) -> tuple[HotRoute, str] | None:
        """The hot route a request is for and its template parameter, or None."""
        for route in self.hot:
            param = route.param(method, path)
            if param is not None:
                return route, param
        return None

    async def answer_hot(self, route: HotRoute, param: str, scope: Scope, start: float) -> Reply:
        """The whole answer to a request for hot ``route`` (steps 4 to 6 of the module docstring: API keys, drain,
        the handler, the count in the metrics since ``start``, a :func:`time.perf_counter` reading). This layer
        calls it for a request that reached it through ASGI; the connection layer (:mod:`app.serving`) calls
        :meth:`answer_hot_now`, the same steps. Never raises for a request's fault or ours (a fault of ours is a
        logged 500)."""
        reply = self.answer_hot_now(route, param, scope, start)
        if isinstance(reply, tuple):
            return reply
        return await reply

    def answer_hot_now(
        self, route: HotRoute, param: str, scope: Scope, start: float, authorization: Any = SCAN
    ) -> Reply | Coroutine[Any, Any, Reply]:
        """:meth:`answer_hot`'s answer at once when its handler answers without waiting (a :data:`Reply`), else the
        coroutine that waits for it and finishes it. ``authorization``: the request's one ``Authorization``
        value when the caller has already found it among ``scope["headers"]``, and no second (None: it has none),
        else it is looked for there when API keys are on (two or more: 401).

        A request of a route that hands out IDs is counted in flight (:class:`~app.api.admin.Drain`) only while it
        waits: one answered at once runs from its drain check to its answer without the event loop turning, so no
        drain can see it in between."""
        access = route.access
        if (self.keys is not None and access.scope is not None) or (access.hands_out_ids and self.drain.draining):
            refused, _ = self.admit(scope, access, authorization)
            if refused is not None:
                return self.finish(refused, access, route.template, scope["method"], start)
        try:
            answer = route.handler(param, scope)
        except IdmintError as exc:
            answer = error_parts(exc)
        except Exception:  # a fault of ours: still JSON, still counted (the traceback goes to the log)
            log.exception("%s %s failed", route.method, route.template)
            answer = 500, INTERNAL_ERROR, []
        if not isinstance(answer, tuple):
            if access.hands_out_ids:
                self.drain.enter()  # before the event loop turns: the coroutine has not run yet
            return self._hot_later(route, answer, scope, start)
        return self._hot_reply(route, answer, scope, start)

    async def _hot_later(self, route: HotRoute, waiting: Awaitable[Answer], scope: Scope, start: float) -> Reply:
        """The rest of :meth:`answer_hot_now` for a handler that waits (``waiting``: its answer), counted in flight
        (entered by the caller) until it has its answer."""
        try:
            answer = await waiting
        except IdmintError as exc:
            answer = error_parts(exc)
        except Exception:  # a fault of ours: still JSON, still counted (the traceback goes to the log)
            log.exception("%s %s failed", route.method, route.template)
            answer = 500, INTERNAL_ERROR, []
        finally:
            if route.access.hands_out_ids:
                self.drain.leave()
        return self._hot_reply(route, answer, scope, start)

    def _hot_reply(self, route: HotRoute, answer: Answer, scope: Scope, start: float) -> Reply:
        """A hot route's ``answer`` settled (a keyed request whose IDs were never charged), given its CORS headers,
        counted and made a :data:`Reply` (what :meth:`finish` does, with the route's own fixed headers)."""
        if UNSETTLED_KEY in scope:
            settle(scope)
        if self.cors:
            allowed = self.cors_headers(scope)
            if allowed:
                answer = answer[0], answer[1], [*answer[2], *allowed]
        status, body, extra = answer
        self.record_hot(route.template, scope["method"], status, time.perf_counter() - start)
        return status, route.fixed, extra, body

    def cors_headers(self, scope: Scope) -> list[Header]:
        """The CORS headers of an answer to ``scope``: its ``Origin`` allowed, when it is a listed one; else none."""
        for name, value in scope["headers"]:
            if name == b"origin":
                if value.lower() in self.cors:
                    return [(b"access-control-allow-origin", value), VARY_ORIGIN, CORS_EXPOSE]
                return []
        return []

    async def _preflight(self, scope: Scope, send: Send, template: str, start: float) -> bool:
        """Answer a CORS preflight (204 with :data:`PREFLIGHT_HEADERS` for a listed origin, 403 for another);
        False when ``scope`` is no preflight."""
        headers = dict(scope["headers"])
        origin = headers.get(b"origin")
        if origin is None or b"access-control-request-method" not in headers:
            return False
        allowed = self.cors_headers(scope)
        if not allowed:
            shown = origin.decode("latin-1")
            body, extra = refusal(f"origin {shown!r} may not call this API from a browser (IDMINT_CORS_ORIGINS)")
            await send_reply(send, self.finish((403, body, [*extra, VARY_ORIGIN]), OPEN, template, "OPTIONS", start))
            return True
        self.metrics.request(template, "OPTIONS", 204, time.perf_counter() - start)
        await send({"type": "http.response.start", "status": 204, "headers": [*allowed, *PREFLIGHT_HEADERS]})
        await send({"type": "http.response.body", "body": b""})
        return True

    def admit(self, scope: Scope, access: Access, authorization: Any = SCAN) -> tuple[Answer | None, KeyState | None]:
        """(refusal, key): the API-key check (401/403/429, :meth:`ApiKeys.check`; ``authorization`` as
        :meth:`answer_hot_now` takes it), then the drain (503 for a route that hands out IDs while the node drains).
        A refusal is None when admitted; the key is None for a public request or without API keys."""
        key = None
        keys = self.keys
        if keys is not None and access.scope is not None:
            try:
                key = keys.check(access, scope, authorization)
            except Refusal as refused:
                body, headers = refusal(refused.reason, refused.retry_after)
                if refused.status == 401:
                    headers.append((b"www-authenticate", b'Bearer realm="idmint"'))
                return (refused.status, body, headers), None
        if access.hands_out_ids and self.drain.draining:
            settle(scope)
            body, headers = refusal(DRAINING, DRAIN_RETRY_AFTER_S)
            return (503, body, headers), None
        return None, key

    def finish(self, answer: Answer, access: Access, template: str, method: str, start: float) -> Reply:
        """Count ``answer`` (one request of ``template``, since ``start``) and make it a :data:`Reply` with the
        headers of its route (``Cache-Control: no-store`` when it hands out IDs)."""
        status, body, extra = answer
        self.metrics.request(template, method, status, time.perf_counter() - start)
        return status, JSON_HEADERS_NO_STORE if access.hands_out_ids else JSON_HEADERS, extra, body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        method = scope["method"]
        head = method == "HEAD"
        if head:  # GET's answer without its body (step 6)
            scope = {**scope, "method": "GET"}
        found = self.hot_route(scope["method"], scope["path"])
        if found is not None:
            template, access = found[0].template, found[0].access
        else:
            template, access = self.route_of(scope)
        answer_hot_with = send  # a hot answer carries its CORS headers itself (answer_hot)
        if self.cors:
            if method == "OPTIONS" and await self._preflight(scope, send, template, start):
                return
            send = self._with_cors(send, self.cors_headers(scope))
        host, expect, hosts, coding, length = framing_fields(scope["headers"])
        chunked = coding is not None
        refused = framing_refusal(scope.get("http_version", "1.1"), host, expect, hosts, coding)
        if refused is None and length is not None:
            refused = self._declared_body(length, access)
        if refused is None and chunked and not access.takes_body:
            refused, receive = await self._unwanted_body(receive)
        if refused is not None:
            await send_reply(send, self.finish(refused, access, template, method, start))
            return
        if head:
            if access.hands_out_ids and not self._names_unknown_scheme(template, scope["path"]):
                await self._head_of_issue(scope, send, start, template, access)
                return
            # Any other HEAD is GET's answer without its body; one that names an unknown scheme takes the full
            # path (GET's 404, nothing issued, counted as HEAD), not the hot one, which writes a GET's answer.
            send = headless(send)
            found = None
        if found is not None:
            await send_reply(answer_hot_with, await self.answer_hot(found[0], found[1], scope, start))
            return
        refused, key = self.admit(scope, access)
        if refused is not None:
            await send_reply(send, self.finish(refused, access, template, method, start))
            return
        drain = self.drain
        if access.hands_out_ids:
            drain.enter()
        try:
            keys = self.keys
            if key is not None and keys is not None and access.stream:
                with keys.streaming(key):
                    await self._fastapi(scope, receive, keys.paced(key, send), start, template, access, method)
            else:
                await self._fastapi(scope, receive, send, start, template, access, method)
        finally:
            if access.hands_out_ids:
                drain.leave()
            if keys is not None:
                settle(scope)

    def _names_unknown_scheme(self, template: str, path: str) -> bool:
        """Whether ``path`` (of route ``template``) names a scheme this node does not serve."""
        if not template.startswith("/v1/ids/{scheme}"):
            return False
        issuers = getattr(getattr(self.app.state, "node", None), "issuers", None)
        return issuers is not None and path.split("/")[3] not in issuers

    async def _head_of_issue(self, scope: Scope, send: Send, start: float, template: str, access: Access) -> None:
        """Answer HEAD of a route that hands out IDs (``scope`` is its GET's): the key check and the drain's
        refusal, else 200 with the route's headers; nothing issued, no IDs charged."""
        refused, _ = self.admit(scope, access)
        settle(scope)  # the request counted; its IDs never charged
        status, fixed, extra, body = self.finish(refused or (200, b"", []), access, template, "HEAD", start)
        if access.stream and refused is None:
            fixed = ((b"content-type", STREAM_MEDIA_TYPE.encode()), NOSNIFF, NO_STORE)
        headers = [*fixed, *extra]
        if refused is not None:
            headers.append((b"content-length", b"%d" % len(body)))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    def _with_cors(send: Send, allowed: list[Header]) -> Send:
        """``send`` adding ``allowed`` (CORS headers) to the answer's start."""
        if not allowed:
            return send

        async def cors_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *allowed]
            await send(message)

        return cors_send

    def _declared_body(self, length: bytes, access: Access) -> Answer | None:
        """The refusal of a body of declared ``length`` bytes, or None (over the limit: 413; to a route that takes
        none: :func:`takes_no_body`)."""
        try:
            declared = int(length)
        except ValueError:
            return None  # the server itself refuses a malformed length
        if declared > self.limit:
            body, headers = refusal(body_too_large(self.limit))
            return 413, body, [*headers, CLOSE]
        if declared and not access.takes_body:
            return takes_no_body(self.limit, declared)
        return None

    async def _unwanted_body(self, receive: Receive) -> tuple[Answer | None, Receive]:
        """Read a body sent without a length to a route that takes none, counting and dropping it, at most up to
        the limit: (refusal, None) when it holds a byte, else (None, a ``receive`` that gives the empty body)."""
        size = 0
        while True:
            message = await receive()
            size += len(message.get("body", b""))
            if size > self.limit or message["type"] != "http.request" or not message.get("more_body", False):
                break
        if size:
            return takes_no_body(self.limit, size), receive
        replay: list[Message] = [message]

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        return None, replayed

    async def _fastapi(
        self, scope: Scope, receive: Receive, send: Send, start: float, template: str, access: Access, method: str
    ) -> None:
        status = 500
        added = (NOSNIFF, NO_STORE) if access.hands_out_ids else (NOSNIFF,)

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), *added]
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            route = scope.get("route")
            self.metrics.request(getattr(route, "path", None) or template, method, status, time.perf_counter() - start)
