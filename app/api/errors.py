"""The one place where idmint's exception tree becomes HTTP status codes (JSON bodies, never a 500 for bad input)."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from app.errors import (
    BackfillCapacityError,
    FleetConflictError,
    IdmintError,
    InvalidIdError,
    InvalidOptionError,
    NotClaimedError,
    NotReadyError,
    RevokeRefusedError,
    SequenceConflictError,
    TooManyRequestsError,
    UnknownSchemeError,
    UnknownSequenceError,
    UnopenedPublicIdError,
    UpgradeRequiredError,
)

log = logging.getLogger("idmint.api")

JSON = "application/json"


def refusal(detail: str, retry_after: int | None = None) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The JSON body ``{"detail": ...}`` of a refusal (with ``"retry_after"``) and its extra headers
    (``Retry-After`` when given): the one shape of every error idmint answers."""
    payload: dict[str, Any] = {"detail": detail}
    headers: list[tuple[bytes, bytes]] = []
    if retry_after is not None:
        payload["retry_after"] = retry_after
        headers.append((b"retry-after", str(retry_after).encode()))
    return json.dumps(payload).encode(), headers


CLIENT_CLOSED_REQUEST = 499
"""The status counted (``idmint_requests_total{status="499"}``, nginx's code) for a request whose client went away
before its body was complete: nothing is sent, it is no fault of ours (not 5xx), and it is logged in one INFO line."""
BODY_LIMIT_PREFIX = "request body must be at most"
"""How every 413 reason of ours begins (:func:`body_too_large`, a route's own smaller limit)."""


def body_too_large(limit: int) -> str:
    """The 413 reason, the same from both layers (this handler and :mod:`app.api.front`)."""
    return f"{BODY_LIMIT_PREFIX} {limit} bytes (IDMINT_MAX_BODY_BYTES)"


def status_for(exc: IdmintError) -> int:
    """HTTP status of an idmint error."""
    if isinstance(exc, (InvalidIdError, InvalidOptionError)):
        return 422
    if isinstance(exc, (UnknownSchemeError, UnknownSequenceError, NotClaimedError, UnopenedPublicIdError)):
        return 404
    if isinstance(exc, (SequenceConflictError, RevokeRefusedError, FleetConflictError, BackfillCapacityError)):
        return 409
    if isinstance(exc, NotReadyError):
        return 503
    if isinstance(exc, TooManyRequestsError):
        return 429
    if isinstance(exc, UpgradeRequiredError):
        return 426
    return 500  # ConfigError and anything else: a fault of ours, not of the request


def error_parts(exc: IdmintError) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """(status, JSON body, extra headers) for an idmint error: ``{"detail": "<rule broken or reason>"}``, with
    ``Retry-After`` (503, 429) or ``Upgrade`` (426, RFC 9110 section 15.5.22)."""
    retry_after = exc.retry_after if isinstance(exc, (NotReadyError, TooManyRequestsError)) else None
    body, headers = refusal(str(exc), retry_after)
    if isinstance(exc, UpgradeRequiredError):  # with the connection option RFC 9110 section 7.8 asks for
        headers += [(b"upgrade", exc.upgrade.encode()), (b"connection", b"upgrade")]
    return status_for(exc), body, headers


def error_response(exc: IdmintError) -> Response:
    status, body, headers = error_parts(exc)
    return Response(body, status_code=status, media_type=JSON, headers={k.decode(): v.decode() for k, v in headers})


def _describe_validation(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        where = f"{loc[0]} parameter {'.'.join(loc[1:])}" if len(loc) > 1 else ".".join(loc)
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    """Map IdmintError subclasses, request validation errors and HTTP errors to JSON ``{"detail": str}``."""

    @app.exception_handler(IdmintError)
    async def _idmint(request: Request, exc: IdmintError) -> Response:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        return Response(json.dumps({"detail": _describe_validation(exc)}), status_code=422, media_type=JSON)

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
        client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
        log.info("%s went away before its request body was complete: %s %s", client, request.method, request.url.path)
        return Response(status_code=CLIENT_CLOSED_REQUEST)  # uvicorn sends nothing to a gone client

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> Response:
        # Starlette's ServerErrorMiddleware sends this, then re-raises for the server to log the traceback.
        return Response(json.dumps({"detail": "internal error"}), status_code=500, media_type=JSON)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        status, detail, headers = exc.status_code, exc.detail, getattr(exc, "headers", None)
        if status == 400:  # FastAPI's answer to a body it cannot decode (not UTF-8): bad input is a 422
            status, detail = 422, "request body must be a JSON object in UTF-8"
        if status == 413:  # FastAPI's max_body_size counting a body sent without a length, or a route's own limit
            if not str(detail).startswith(BODY_LIMIT_PREFIX):  # a route's own limit names itself
                detail = body_too_large(request.app.state.settings.max_body_bytes)
            headers = {**(headers or {}), "Connection": "close"}  # the rest of the body is not read
        return Response(json.dumps({"detail": detail}), status_code=status, media_type=JSON, headers=headers)
