"""Issuing routes: ``/v1/ids/{scheme}`` (JSON) and ``/v1/ids/{scheme}/stream`` (text, one ID per line).

``GET /v1/ids/{scheme}`` is normally answered by the lean ASGI fast path (:mod:`app.api.fastpath`) before FastAPI
routing; these routes define the contract (and the OpenAPI docs), serve POST, and answer every case the fast path
hands over (errors, waits).
"""

from __future__ import annotations

import logging
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.responses import Response, StreamingResponse

from app.api.deps import NodeDep, SettingsDep
from app.api.issuing import issue_body, prepare
from app.api.streams import open_stream

log = logging.getLogger("idmint.api")
router = APIRouter(tags=["issue"])

CountQ = Query(1, description="How many IDs (1..max_count; the stream allows up to max_stream_count).")
FormatQ = Query(None, description="Text form; default the scheme's canonical form. See /v1/schemes.")
ModeQ = Query(None, description="eight-byte only: spread (default) or time_sequential.")
TypeQ = Query(None, alias="type", description="siq only: the qualifier type name (default user).")
AfterQ = Query(None, description="hlc-ulid only: every returned ID sorts after this HLC-ULID (HLC merge).")


class IssueResponse(BaseModel):
    scheme: str = Field(examples=["wiji"])
    format: str = Field(examples=["base32"])
    ids: list[str] = Field(examples=[["0691J1V9G0000G7Q3N6T1XAFNG"]])
    bundle: str | None = Field(None, description="muid only: the offset-0 Muid of the batch (the Gink bundle).")


STREAM_ERRORS = {429: {"description": "this node already serves IDMINT_MAX_CONCURRENT_STREAMS streams (Retry-After)"}}
ERRORS = {404: {"description": "unknown scheme"}, 422: {"description": "bad count or option (detail names the rule)"},
          503: {"description": "this node cannot be sure its identity is exclusive (Retry-After)"}}


async def issue(scheme: str, node: NodeDep, settings: SettingsDep, count: int = CountQ,
                format: str | None = FormatQ, mode: str | None = ModeQ, type: str | None = TypeQ,
                after: str | None = AfterQ) -> Response:
    """Issue ``count`` fresh IDs of ``scheme``."""
    issuer, count, fmt, options = prepare(node, scheme, count, format, mode, type, after, settings.max_count)
    issued = await issuer.issue(count, options)
    return Response(issue_body(scheme, fmt, issued), media_type="application/json")


async def stream(scheme: str, request: Request, node: NodeDep, settings: SettingsDep, count: int = CountQ,
                 format: str | None = FormatQ, mode: str | None = ModeQ, type: str | None = TypeQ,
                 after: str | None = AfterQ) -> StreamingResponse:
    """Stream ``count`` IDs as text, one per line, with memory that does not grow with ``count``.

    Everything is checked before the first byte (parameters, the expected duration at the scheme's cap, the node's
    stream cap, and a first chunk issued); a client that goes away ends the stream within one chunk. If the node
    stops being sure of its identity mid-stream, the response ends without its final chunk, so the client sees a
    truncated transfer rather than a short, clean list.
    """
    issuer, count, fmt, options = prepare(node, scheme, count, format, mode, type, after,
                                          settings.max_stream_count)
    return await open_stream(request, issuer, count, fmt, options, request.app.state.streams,
                             settings.max_stream_seconds)


for _method in ("GET", "POST"):
    router.add_api_route("/v1/ids/{scheme}", issue, methods=[_method], response_model=IssueResponse,
                         responses=ERRORS, operation_id=f"issue_{_method.lower()}")
    router.add_api_route("/v1/ids/{scheme}/stream", stream, methods=[_method], response_class=StreamingResponse,
                         responses={200: {"content": {"text/plain": {}}, "description": "one ID per line"}, **ERRORS,
                                    **STREAM_ERRORS},
                         operation_id=f"stream_{_method.lower()}")
