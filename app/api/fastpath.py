"""A lean ASGI front for the hot path, ``GET /v1/ids/{scheme}``, in front of the FastAPI app.

Stock FastAPI routing plus dependency injection roughly halves single-ID throughput, so a plain GET for a known
scheme is answered here: the query string is split by hand, the same parser (:mod:`app.api.params`, one pydantic
model per scheme) and the same issuer are used, and the response is written with pre-built headers. Errors are
answered here too, worded exactly as the FastAPI routes word them (same parser). POST, the stream and every other
request go to FastAPI through :class:`RequestMetrics`, which counts it by route template.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from urllib.parse import unquote_plus

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.auth import charge_ids
from app.api.errors import error_parts, send_json
from app.api.issuing import answer_body
from app.api.params import parse_issue, query_params
from app.errors import IdmintError
from app.node import Issuer, Node

log = logging.getLogger("idmint.api")

INTERNAL_ERROR = b'{"detail": "internal error"}'
PREFIX = "/v1/ids/"
ROUTE = "/v1/ids/{scheme}"
NOSNIFF = (b"x-content-type-options", b"nosniff")


def split_query(raw: bytes) -> list[tuple[str, str]]:
    """Query pairs as Starlette reads them (latin-1 bytes, ``+`` as space, %-escapes as UTF-8), in order."""
    pairs = []
    for part in raw.decode("latin-1").split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        if "%" in name or "+" in name:
            name = unquote_plus(name)
        pairs.append((name, unquote_plus(value) if "%" in value or "+" in value else value))
    return pairs


class FastPath:
    """ASGI app: serves GET /v1/ids/{scheme} directly, everything else through ``app`` (with request metrics).

    The typed front of the service: :func:`app.main.create_app` returns it; ``.app`` is the FastAPI app.
    """

    def __init__(self, app: FastAPI, node_ref: Callable[[], Node | None], max_count: Callable[[], int]) -> None:
        self.app = app
        self.inner = RequestMetrics(app, node_ref)
        self.node_ref = node_ref
        self.max_count = max_count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].startswith(PREFIX):
            node = self.node_ref()
            if node is not None:
                issuer = node.issuers.get(scope["path"][len(PREFIX) :])
                if issuer is not None:
                    await self._issue(node, issuer, scope, send)
                    return
        await self.inner(scope, receive, send)

    async def _issue(self, node: Node, issuer: Issuer, scope: Scope, send: Send) -> None:
        start = time.perf_counter()
        headers: list[tuple[bytes, bytes]] = []
        try:
            query = scope["query_string"]
            params = query_params(split_query(query)) if query else {}
            request = parse_issue(issuer.scheme, params, self.max_count())
            charge_ids(scope, request.count)
            issued = await issuer.issue(request.count, request.options)
            body = await answer_body(issuer.name, request.format, issued)
            status = 200
        except IdmintError as exc:
            status, body, headers = error_parts(exc)
        except Exception:  # a fault of ours: still JSON, still counted (the traceback goes to the log)
            log.exception("GET %s failed", ROUTE)
            status, body = 500, INTERNAL_ERROR
        await send_json(send, status, body, headers)
        node.metrics.request(ROUTE, "GET", status, time.perf_counter() - start)


class RequestMetrics:
    """ASGI middleware: ``idmint_requests_total`` / ``idmint_request_duration_seconds`` by route template."""

    def __init__(self, app: ASGIApp, node_ref: Callable[[], Node | None]) -> None:
        self.app = app
        self.node_ref = node_ref

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), NOSNIFF]  # every response: no MIME sniffing
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            node = self.node_ref()
            if node is not None:
                route = scope.get("route")
                template = getattr(route, "path", None) or "unmatched"
                node.metrics.request(template, scope["method"], status, time.perf_counter() - start)
