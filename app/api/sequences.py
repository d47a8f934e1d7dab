"""Sequence routes: ``/v1/sequences`` (create, list, show), ``/v1/sequences/{name}/next`` and ``.../range``.

``GET /v1/sequences/{name}/next`` and a body-less ``POST /v1/sequences/{name}/range`` are hot routes
(:func:`hot_next`, :func:`hot_range`, in the front's table, :class:`~app.api.front.Front`): they are served through
the same service and the same query parser (:func:`sequence_query`: ``count`` and ``format``, each at most once)
without FastAPI; anything else (POST next) goes to the FastAPI routes here, which also declare the
contract.

``format=string`` answers the integers as JSON strings (``"ids": ["1", "2"]``; ``first`` and ``last`` of a
range): JavaScript's ``JSON.parse`` rounds numbers above 2**53, a string keeps every 64-bit integer exact.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from starlette.responses import Response
from starlette.types import Scope

from app.api.access import declare
from app.api.auth import charge_ids
from app.api.front import Answer, HotHandler
from app.api.issuing import off_loop
from app.api.params import parse_body, parse_count, parse_sequence_format, query_params, read_body, split_query
from app.errors import InvalidOptionError
from app.sequences import SequenceService
from app.sequences.buffer import Runs
from app.sequences.text import encode_runs
from app.storage.sequences import DEFAULT_CACHE, DEFAULT_START, MAX_RANGE_COUNT, NAME_PATTERN

router = APIRouter(tags=["sequences"])

NEXT_ROUTE = "/v1/sequences/{name}/next"
RANGE_ROUTE = "/v1/sequences/{name}/range"
THREAD_ENCODE_MIN = 20_000
"""``next`` answers with at least this many integers are written out in a worker thread, off the event loop."""


def get_sequences(request: Request) -> SequenceService:
    return request.app.state.sequences  # type: ignore[no-any-return]


SequencesDep = Annotated[SequenceService, Depends(get_sequences)]

CountQ = Query(None, description="How many integers: ASCII digits, 1..max count (next) or 1..2**40 (range).")
FormatQ = Query(
    None,
    description="number (default): the integers as JSON numbers; string: as JSON strings of their decimal digits, "
    "exact in JavaScript (JSON.parse rounds numbers above 2**53).",
    examples=["string"],
)


class CreateSequence(BaseModel):
    """``CREATE SEQUENCE name START start CACHE cache`` (increment 1)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description=f"{NAME_PATTERN}", examples=["orders"])
    start: StrictInt = Field(DEFAULT_START, description="The first integer issued (0..2**63-1).")
    cache: StrictInt = Field(
        DEFAULT_CACHE,
        description="The smallest range a node reserves at once (1..1,000,000); "
        "a node's buffer reserves between cache and 100 x cache.",
    )


class SequenceOut(BaseModel):
    name: str
    start: int
    cache: int
    next: int = Field(description="The allocation point: the first integer no node has reserved yet.")
    node: dict[str, Any] = Field(
        description="This node's ranges (first, last still unissued), held count, reservation size, integers issued."
    )


class NextOut(BaseModel):
    name: str
    ids: list[int] | list[str] = Field(description="Rising integers: JSON numbers, or strings with format=string.")


class RangeOut(BaseModel):
    name: str
    first: int | str = Field(description="The first integer of the range (a string with format=string).")
    last: int | str = Field(description="The last integer of the range (a string with format=string).")
    count: int


ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "unknown sequence"},
    422: {"description": "bad name or count, or the sequence would pass 2**63-1 (detail names the rule)"},
    503: {"description": "storage unreachable and this node holds no integers for it (Retry-After)"},
}


@router.post(
    "/v1/sequences",
    status_code=201,
    response_model=SequenceOut,
    responses={
        200: {"description": "exists with the same settings"},
        409: {"description": "exists with other settings, or too many sequences"},
        **ERRORS,
    },
    openapi_extra=declare(
        "admin",
        requestBody={
            "required": True,
            "content": {"application/json": {"schema": CreateSequence.model_json_schema()}},
        },
    ),
)
async def create_sequence(request: Request, sequences: SequencesDep) -> Response:
    """Create a sequence (idempotent: 201 when created, 200 when it exists with the same settings). The body is
    read strictly: a member given twice or an unknown one is a 422."""
    body = parse_body(await read_body(request), CreateSequence, '{"name": ..., "start": ..., "cache": ...}')
    record, created = await sequences.create(body.name, body.start, body.cache)
    entry = (
        await sequences.describe(record.name)
        if not created
        else {**record.as_dict(), "node": {"ranges": [], "held": 0}}
    )
    return _json(entry, 201 if created else 200)


@router.get("/v1/sequences", openapi_extra=declare("sequences"))
async def list_sequences(sequences: SequencesDep) -> dict[str, Any]:
    """Every sequence (allocation point, cache, this node's ranges), the rules, and the storage in use."""
    return {"sequences": await sequences.list(), "limits": sequences.limits(), "store": sequences.store.status()}


@router.get("/v1/sequences/{name}", openapi_extra=declare("sequences"), response_model=SequenceOut, responses=ERRORS)
async def show_sequence(name: str, sequences: SequencesDep) -> dict[str, Any]:
    """One sequence: allocation point, cache, and this node's ranges."""
    return await sequences.describe(name)


def sequence_query(pairs: list[tuple[str, str]]) -> tuple[str | None, bool]:
    """(count text, as strings?) of ``next`` and ``range``: the one reader of their query (FastAPI routes and the
    fast path). Another parameter, or one given twice (``format=string&format=number``), is a 422 naming it: never
    silently ignored, never the last one given. The count text is checked by :func:`parse_count`, the format by
    :func:`~app.api.params.parse_sequence_format`."""
    params = query_params(pairs)
    unknown = sorted(set(params) - {"count", "format"})
    if unknown:
        raise InvalidOptionError(
            f"unknown parameter {unknown[0]!r}: this route takes only count and format, in the query"
        )
    return params.get("count"), parse_sequence_format(params.get("format"))


async def read_query(request: Request) -> tuple[str | None, bool]:
    """:func:`sequence_query` of a FastAPI request; a request body is a 422 as well."""
    query = sequence_query(request.query_params.multi_items())
    if await request.body():
        raise InvalidOptionError("this route takes no request body: give count and format in the query")
    return query


async def next_ids(
    name: str,
    sequences: SequencesDep,
    request: Request,
    count: str | None = CountQ,
    format: str | None = FormatQ,  # the parameter's name in the API (documented; read by read_query)
) -> Response:
    """``count`` integers of ``name`` from this node's in-memory ranges, in rising order."""
    count_text, as_strings = await read_query(request)
    n = parse_count(count_text, sequences.max_count)
    charge_ids(request.scope, n)
    runs = await sequences.next(name, n)
    return Response(await next_body(name, runs, n, as_strings), media_type="application/json")


for _method in ("GET", "POST"):
    router.add_api_route(
        NEXT_ROUTE,
        next_ids,
        methods=[_method],
        response_model=NextOut,
        responses=ERRORS,
        operation_id=f"sequence_next_{_method.lower()}",
        openapi_extra=declare("sequences", hands_out_ids=True),
    )


@router.post(
    RANGE_ROUTE,
    openapi_extra=declare("sequences", hands_out_ids=True),
    response_model=RangeOut,
    responses=ERRORS,
)
async def reserve_range(
    name: str,
    sequences: SequencesDep,
    request: Request,
    count: str | None = CountQ,
    format: str | None = FormatQ,  # the parameter's name in the API (documented; read by read_query)
) -> Response:
    """A fresh contiguous range of ``count`` integers (1..2**40) reserved in storage, for offline jobs."""
    count_text, as_strings = await read_query(request)
    n = parse_count(count_text, MAX_RANGE_COUNT)
    charge_ids(request.scope, n, within_quota=True)
    first, last = await sequences.reserve_range(name, n)
    return Response(range_body(name, first, last, n, as_strings), media_type="application/json")


async def next_body(name: str, runs: Runs, count: int, as_strings: bool = False) -> bytes:
    """``{"name": ..., "ids": [...]}`` (the integers as strings with ``as_strings``); large answers are written in
    a worker thread."""
    digits = encode_runs(runs) if count < THREAD_ENCODE_MIN else await off_loop(encode_runs, runs)
    if as_strings:  # decimal digits never hold a comma or a quote: quoting is one replace
        digits = b'"' + digits.replace(b",", b'","') + b'"'
    return b'{"name":"' + name.encode() + b'","ids":[' + digits + b"]}"


def range_body(name: str, first: int, last: int, count: int, as_strings: bool = False) -> bytes:
    """``{"name", "first", "last", "count"}``; ``first`` and ``last`` as strings with ``as_strings`` (``count``,
    at most 2**40, stays a number)."""
    q = b'"' if as_strings else b""
    return b'{"name":"%s","first":%s%d%s,"last":%s%d%s,"count":%d}' % (name.encode(), q, first, q, q, last, q, count)


def _json(payload: dict[str, Any], status: int) -> Response:
    import json

    return Response(json.dumps(payload, separators=(",", ":")), status_code=status, media_type="application/json")


# -- the hot routes ------------------------------------------------------------------------------------------------


def _query(raw: bytes) -> tuple[str | None, bool]:
    """:func:`sequence_query` of a raw query string, read as the FastAPI routes read it
    (:func:`~app.api.params.split_query`); a plain ``count=N`` skips the split."""
    if not raw:
        return None, False
    if raw.startswith(b"count=") and not any(c in raw for c in (b"&", b"%", b"+")):
        return raw[6:].decode("latin-1"), False
    return sequence_query(split_query(raw))


def hot_next(service: SequenceService) -> HotHandler:
    """The hot handler of ``GET /v1/sequences/{name}/next``: the same query reader, count parser, service and body
    as :func:`next_ids`, without FastAPI (the front refuses a body before it runs)."""

    async def answer(name: str, scope: Scope) -> Answer:
        count_text, as_strings = _query(scope["query_string"])
        count = parse_count(count_text, service.max_count)
        charge_ids(scope, count)
        runs = service.next_now(name, count)
        if runs is None:
            runs = await service.next(name, count)
        return 200, await next_body(name, runs, count, as_strings), []

    return answer


def hot_range(service: SequenceService) -> HotHandler:
    """The hot handler of a body-less ``POST /v1/sequences/{name}/range`` (as :func:`reserve_range`)."""

    async def answer(name: str, scope: Scope) -> Answer:
        count_text, as_strings = _query(scope["query_string"])
        count = parse_count(count_text, MAX_RANGE_COUNT)
        charge_ids(scope, count, within_quota=True)
        first, last = await service.reserve_range(name, count)
        return 200, range_body(name, first, last, count, as_strings), []

    return answer
