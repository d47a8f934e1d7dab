"""Issuing routes: ``/v1/ids/{scheme}`` (JSON) and ``/v1/ids/{scheme}/stream`` (text, one ID per line).

``GET /v1/ids/{scheme}`` is a hot route: :func:`hot_issue` answers it from the front's table
(:class:`~app.api.front.Front`; ``idmint serve``'s connection layer, :mod:`app.serving`, calls the same) without
FastAPI; the FastAPI routes here declare the contract (scope, OpenAPI docs) and serve POST and the stream. Every
path parses
its parameters with the same per-scheme model (:mod:`app.api.params`): a query string, and for POST also a JSON
object body with the same members.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.responses import Response, StreamingResponse
from starlette.types import Scope

from app.api.access import declare
from app.api.auth import ids_charge
from app.api.deps import NodeDep, SettingsDep
from app.api.front import Answer, HotHandler
from app.api.issuing import THREAD_ENCODE_MIN, answer_body, issue_body, prepare, public_wrap
from app.api.params import (
    MEMO_TEXT_BYTES,
    QUERY_MEMO_SIZE,
    IssueParams,
    IssueRequest,
    merge_body,
    option_owners,
    parse_issue_query,
    query_params,
    read_body,
)
from app.api.streams import open_stream
from app.issuing.issuer import Issued, Issuer
from app.issuing.node import Node
from app.public.forms import Public
from app.schemes import schemes
from app.schemes.base import PUBLIC_FORMAT
from app.settings import Settings

log = logging.getLogger("idmint.api")
router = APIRouter(tags=["issue"])


class IssueResponse(BaseModel):
    scheme: str = Field(examples=["<scheme name>"])
    format: str = Field(examples=["base32"])
    ids: list[str] = Field(examples=[["0691J1V9G0000G7Q3N6T1XAFNG"]])
    bundle: str | None = Field(None, description="muid only: the offset-0 Muid of the batch (the Gink bundle).")


ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "unknown scheme"},
    413: {"description": "request body too large"},
    422: {"description": "bad count or option (detail names the rule)"},
    503: {"description": "this node cannot be sure its identity is exclusive (Retry-After)"},
}
STREAM_ERRORS: dict[int | str, dict[str, Any]] = {
    426: {"description": "asked over HTTP/1.0, which cannot carry a stream (Upgrade: HTTP/1.1)"},
    429: {"description": "this node already serves IDMINT_MAX_CONCURRENT_STREAMS streams (Retry-After)"},
}


async def request_params(request: Request) -> dict[str, Any]:
    """The issue parameters of a request: its query, plus (POST) the members of its JSON object body."""
    params: dict[str, Any] = query_params(request.query_params.multi_items())
    if request.method == "POST":
        params = merge_body(params, await read_body(request))
    return params


ParamsDep = Annotated[dict[str, Any], Depends(request_params)]


async def issue(scheme: str, params: ParamsDep, http: Request, node: NodeDep, settings: SettingsDep) -> Response:
    """Issue ``count`` fresh IDs of ``scheme``."""
    issuer, request = prepare(node, scheme, params, settings.max_count)
    wrap = public_wrap(http.app.state.public, request.format)
    issued = await issuer.issue(request.count, request.options, charge=ids_charge(http.scope))
    if wrap is not None:
        issued = wrap(issued)
    return Response(await answer_body(scheme, request.format, issued), media_type="application/json")


def hot_issue(node: Node, settings: Settings, public: Public | None = None) -> HotHandler:
    """The hot handler of ``GET /v1/ids/{scheme}``: the same issuer lookup (UnknownSchemeError, 404 naming the
    known schemes), parser (:func:`~app.api.params.parse_issue`), issuer and body as :func:`issue`, without
    FastAPI."""

    maximum = settings.max_count
    parsed: dict[tuple[str, bytes], tuple[Issuer, IssueRequest]] = {}
    """(scheme, raw query) -> (issuer, parsed request), for the last QUERY_MEMO_SIZE distinct valid ones of at most
    MEMO_TEXT_BYTES (cleared when full; a refused one raises every time)."""

    def answer(scheme: str, scope: Scope) -> Answer | Awaitable[Answer]:
        query = scope["query_string"]
        found = parsed.get((scheme, query))
        if found is None:
            issuer = node.issuer(scheme)
            found = issuer, parse_issue_query(issuer.scheme, query, maximum)
            if len(query) <= MEMO_TEXT_BYTES:
                if len(parsed) >= QUERY_MEMO_SIZE:
                    parsed.clear()
                parsed[(scheme, query)] = found
        issuer, request = found
        fmt = request.format
        if fmt == PUBLIC_FORMAT:
            return answer_public(issuer, request, scope)
        issued = issuer.issue_now(request.count, request.options, charge=ids_charge(scope))
        if isinstance(issued, Issued) and issued.count < THREAD_ENCODE_MIN:
            return 200, issue_body(issuer.name, fmt, issued), []
        return answer_later(issuer, fmt, issued)

    async def answer_later(issuer: Issuer, fmt: str, issued: Issued | Awaitable[Issued]) -> Answer:
        if not isinstance(issued, Issued):
            issued = await issued
        return 200, await answer_body(issuer.name, fmt, issued), []

    async def answer_public(issuer: Issuer, request: IssueRequest, scope: Scope) -> Answer:
        wrap = public_wrap(public, request.format)  # raises before any ID is issued when there is no key file
        issued = await issuer.issue(request.count, request.options, charge=ids_charge(scope))
        if wrap is not None:
            issued = wrap(issued)
        return 200, await answer_body(issuer.name, request.format, issued), []

    return answer


async def stream(
    scheme: str, params: ParamsDep, http: Request, node: NodeDep, settings: SettingsDep
) -> StreamingResponse:
    """Stream ``count`` IDs as text, one per line, with memory that does not grow with ``count``.

    Everything is checked before the first byte (parameters, the expected duration at the scheme's cap, the node's
    stream cap, and a first chunk issued); a client that goes away ends the stream within one chunk. If the node
    stops being sure of its identity mid-stream, the response ends without its final chunk, so the client sees a
    truncated transfer rather than a short, clean list.
    """
    issuer, request = prepare(node, scheme, params, settings.max_stream_count)
    return await open_stream(
        http,
        issuer,
        request.count,
        request.format,
        request.options,
        http.app.state.streams,
        settings.max_stream_seconds,
        charge=ids_charge(http.scope),
        wrap=public_wrap(http.app.state.public, request.format),
    )


def _documented_parameters() -> list[dict[str, Any]]:
    """OpenAPI query parameters: count, format, and every scheme's options (each saying which schemes take it)."""
    out: list[dict[str, Any]] = []
    for name, field in IssueParams.model_fields.items():
        out.append(
            {
                "name": name,
                "in": "query",
                "required": False,
                "description": field.description,
                "schema": {"type": "integer" if name == "count" else "string"},
            }
        )
    seen: set[str] = set()
    for scheme in schemes().values():
        for option in scheme.options:
            if option.name in seen:
                continue
            seen.add(option.name)
            schema: dict[str, Any] = {"type": "string"}
            out.append(
                {
                    "name": option.name,
                    "in": "query",
                    "required": False,
                    "schema": schema,
                    "description": f"{', '.join(option_owners(option.name))} only: {option.description}",
                }
            )
    return out


def _openapi(method: str) -> dict[str, Any]:
    extra: dict[str, Any] = {"parameters": _documented_parameters()}
    if method == "POST":
        members = {p["name"]: {**p["schema"], "description": p["description"]} for p in extra["parameters"]}
        extra["requestBody"] = {
            "required": False,
            "content": {
                "application/json": {"schema": {"type": "object", "properties": members, "additionalProperties": False}}
            },
            "description": "The same parameters as the query, as a JSON object (each given once in all).",
        }
    return extra


for _method in ("GET", "POST"):
    router.add_api_route(
        "/v1/ids/{scheme}",
        issue,
        methods=[_method],
        response_model=IssueResponse,
        responses=ERRORS,
        operation_id=f"issue_{_method.lower()}",
        openapi_extra=declare("issue", hands_out_ids=True, **_openapi(_method)),
    )
    router.add_api_route(
        "/v1/ids/{scheme}/stream",
        stream,
        methods=[_method],
        response_class=StreamingResponse,
        responses={200: {"content": {"text/plain": {}}, "description": "one ID per line"}, **ERRORS, **STREAM_ERRORS},
        operation_id=f"stream_{_method.lower()}",
        openapi_extra=declare("stream", hands_out_ids=True, **_openapi(_method)),
    )
