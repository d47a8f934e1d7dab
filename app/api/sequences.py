"""Sequence routes: ``/v1/sequences`` (create, list), ``/v1/sequences/{name}`` (show, PATCH, DELETE), ``.../next``,
``.../range``, ``.../setval``, ``.../parse/{text}``, and a gapless sequence's ``.../reserve``, ``.../commit``,
``.../void``, ``.../audit`` and ``.../holes``.

``GET /v1/sequences/{name}/next`` and a body-less ``POST /v1/sequences/{name}/range`` are hot routes
(:func:`hot_next`, :func:`hot_range`, in the front's table, :class:`~app.api.front.Front`): they are served through
the same service and the same query parser (:func:`sequence_query`: ``count`` and ``format``, each at most once)
without FastAPI; anything else (POST next, a body) goes to the FastAPI routes here, which also declare the
contract. A plain sequence's ``next`` (never resets, no template) takes the hot path (the buffer alone).

``format=string`` answers the integers as JSON strings (``"ids": ["1", "2"]``; ``first`` and ``last`` of a
range): JavaScript's ``JSON.parse`` rounds numbers above 2**53, a string keeps every 64-bit integer exact.

Who may do what, with API keys on: ``sequences`` to read and to take integers (next, range, parse, reserve,
commit, void); ``admin`` to create, PATCH, setval, DELETE and to read the audit log and the holes.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from starlette.responses import Response
from starlette.types import Scope

from app.api.access import declare
from app.api.auth import ids_charge, key_name
from app.api.front import Answer, HotHandler
from app.api.issuing import off_loop
from app.api.params import (
    parse_body,
    parse_count,
    parse_sequence_format,
    query_params,
    read_body,
    split_query,
)
from app.errors import InvalidOptionError
from app.public.forms import Public
from app.schemes.base import PUBLIC_FORMAT
from app.sequences import SequenceService
from app.sequences.buffer import Runs
from app.sequences.points import REASON_CHARS_MAX, TTL_DEFAULT_S, TTL_MAX_S, TTL_MIN_S, Who
from app.sequences.service import AUDIT_PAGE_DEFAULT, AUDIT_PAGE_MAX, Issued, Reserved
from app.sequences.spec import SequenceOptions, SequenceSpec
from app.sequences.text import encode_runs
from app.storage.sequences import DEFAULT_CACHE, DEFAULT_START, MAX_RANGE_COUNT, NAME_PATTERN

router = APIRouter(tags=["sequences"])

NEXT_ROUTE = "/v1/sequences/{name}/next"
RANGE_ROUTE = "/v1/sequences/{name}/range"
THREAD_ENCODE_MIN = 20_000
"""``next`` answers with at least this many integers are written out in a worker thread, off the event loop."""
THREAD_TEXT_MIN = 5_000
"""The same for texts (rendering a template costs several times the plain integers: bench/bench_templates.py)."""


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


class CreateSequence(SequenceOptions):
    """``CREATE SEQUENCE name START start CACHE cache`` and the business settings (all optional: a sequence
    created without them is today's, stored as before)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description=f"{NAME_PATTERN}", examples=["orders"])
    start: StrictInt = Field(DEFAULT_START, description="The first integer issued (0..2**63-1).")
    cache: StrictInt = Field(
        DEFAULT_CACHE,
        description="The smallest range a node reserves at once (1..1,000,000); "
        "a node's buffer reserves between cache and 100 x cache.",
    )


class PatchSequence(BaseModel):
    """What PATCH may change; every member optional (``template: null`` removes the template)."""

    model_config = ConfigDict(extra="forbid")
    cache: StrictInt | None = Field(None, description="1..1,000,000; applies to the next reservation of every node.")
    increment: StrictInt | None = Field(None, description="1..2**31; applies from the allocation point on.")
    template: StrictStr | None = Field(
        None, description="A template whose numbers cannot read as any number of the former templates."
    )
    check_digit: StrictStr | None = Field(None, description="luhn, damm or mod97 (with a template holding {check}).")


class Setval(BaseModel):
    model_config = ConfigDict(extra="forbid")
    next: StrictInt = Field(description="The new allocation point (forward only: backward could repeat).")
    period: StrictStr | None = Field(
        None, description="A resetting sequence's period (its first day, 2026-11-27); default the current one."
    )


class ReserveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttl_s: StrictInt = Field(
        TTL_DEFAULT_S, description=f"Seconds before an uncommitted reservation expires ({TTL_MIN_S}..{TTL_MAX_S})."
    )
    period: StrictStr | None = Field(
        None,
        description="A resetting sequence's period (its first day, 2026-11-01); default the current one. An ended "
        "period, within the sequence's period_grace_s after its end: refills one of its voided integers (409 when "
        "none waits, or past the grace window).",
    )


class CommitIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reservation: StrictStr = Field(description="The reservation ID reserve answered.")


class VoidIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reservation: StrictStr = Field(description="The reservation ID reserve answered.")
    reason: StrictStr | None = Field(None, description=f"Why (printable, at most {REASON_CHARS_MAX} characters).")


class SequenceOut(BaseModel):
    """A sequence as shown; a business sequence's also carries its settings (increment, reset, time_zone, template,
    check_digit, mode), ``period`` (the current one, for a resetting sequence) and ``gapless`` (outstanding,
    voided_waiting, committed)."""

    model_config = ConfigDict(extra="allow")
    name: str
    start: int
    cache: int
    next: int | None = Field(
        description="The allocation point: the first integer no node has reserved yet (of the current period, for a "
        "resetting sequence; null in the list, where each period has its own)."
    )
    node: dict[str, Any] = Field(
        description="This node's ranges (first, last still unissued), held count, reservation size, integers issued."
    )


class NextOut(BaseModel):
    name: str
    ids: list[int] | list[str] = Field(description="Rising integers: JSON numbers, or strings with format=string.")
    text: list[str] | None = Field(None, description="With a template: each integer's text.")
    period: str | None = Field(None, description="A resetting or templated sequence's: the period's first day.")


class RangeOut(BaseModel):
    name: str
    first: int | str = Field(description="The first integer of the range (a string with format=string).")
    last: int | str = Field(description="The last integer of the range (a string with format=string).")
    count: int
    increment: int | None = Field(None, description="A business sequence's: the integers are first, first+increment...")
    period: str | None = Field(None, description="A resetting sequence's: the period the range belongs to.")


class ReservationOut(BaseModel):
    name: str
    value: int
    text: str | None
    period: str | None
    reservation: str
    expires_at: str


class SettledOut(BaseModel):
    name: str
    value: int
    text: str | None
    period: str | None
    reservation: str
    state: str = Field(description="committed, voided or expired")


ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "unknown sequence"},
    422: {"description": "bad name or count, or the sequence would pass 2**63-1 (detail names the rule)"},
    503: {"description": "storage unreachable and this node holds no integers for it (Retry-After)"},
}
CONFLICT: dict[int | str, dict[str, Any]] = {409: {"description": "refused, the detail says why"}}


@router.post(
    "/v1/sequences",
    status_code=201,
    response_model=SequenceOut,
    responses={
        200: {"description": "exists with the same settings"},
        409: {"description": "exists with other settings, too many sequences, or its tombstone refuses it"},
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
    spec = SequenceSpec.build(**body.model_dump(exclude={"name", "start", "cache"}))
    record, created = await sequences.create(body.name, body.start, body.cache, spec)
    return _json(await sequences.describe(record.name), 201 if created else 200)


@router.get("/v1/sequences", openapi_extra=declare("sequences"))
async def list_sequences(sequences: SequencesDep) -> dict[str, Any]:
    """Every sequence (allocation point, cache, settings, this node's ranges), the rules, and the storage in use."""
    return {"sequences": await sequences.list(), "limits": sequences.limits(), "store": sequences.store.status()}


@router.get("/v1/sequences/{name}", openapi_extra=declare("sequences"), response_model=SequenceOut, responses=ERRORS)
async def show_sequence(name: str, sequences: SequencesDep) -> dict[str, Any]:
    """One sequence: allocation point (the current period's), settings, and this node's ranges."""
    return await sequences.describe(name)


@router.patch(
    "/v1/sequences/{name}",
    response_model=SequenceOut,
    responses=ERRORS,
    openapi_extra=declare(
        "admin",
        requestBody={"required": True, "content": {"application/json": {"schema": PatchSequence.model_json_schema()}}},
    ),
)
async def patch_sequence(name: str, request: Request, sequences: SequencesDep) -> dict[str, Any]:
    """Change ``cache``, ``increment`` or ``template`` (and ``check_digit``); a new template must keep every
    number distinct from the old templates' (422 naming the rule otherwise). ``reset``, ``time_zone``, ``mode``
    and ``start`` never change."""
    body = parse_body(await read_body(request), PatchSequence, '{"cache": ..., "increment": ..., "template": ...}')
    changes = {k: getattr(body, k) for k in body.model_fields_set if k != "cache"}
    if not body.model_fields_set:
        raise InvalidOptionError("the body must change at least one of cache, increment, template, check_digit")
    if "cache" in body.model_fields_set and body.cache is None:
        raise InvalidOptionError("cache must be an integer in 1..1000000, got null")
    return await sequences.patch(name, body.cache, changes)


@router.delete("/v1/sequences/{name}", responses={**ERRORS, **CONFLICT}, openapi_extra=declare("admin"))
async def delete_sequence(
    name: str,
    request: Request,
    sequences: SequencesDep,
    force: bool = Query(False, description="A gapless sequence's open reservations are voided first (audited)."),
) -> dict[str, Any]:
    """Delete a sequence. A tombstone stays: created again, the name continues above every integer it issued (or
    is refused, 409, when its reset or template could meet the old one's). Nodes drop their ranges of it within a
    few seconds; the audit log stays for IDMINT_LEDGER_DAYS. A gapless sequence with reservations open is a 409
    naming how many and the first to expire; ``force=true`` voids them (a ``void`` event each), then deletes."""
    return await sequences.remove(name, force, _who(request, sequences))


@router.post(
    "/v1/sequences/{name}/setval",
    responses={**ERRORS, **CONFLICT},
    openapi_extra=declare(
        "admin", requestBody={"required": True, "content": {"application/json": {"schema": Setval.model_json_schema()}}}
    ),
)
async def setval(name: str, request: Request, sequences: SequencesDep) -> dict[str, Any]:
    """Move the allocation point forward to ``next`` (backward is a 422: it could repeat). Integers nodes already
    hold below it are still issued; no integer at or above it was."""
    body = parse_body(await read_body(request), Setval, '{"next": N}')
    return await sequences.setval(name, body.next, body.period)


def sequence_query(pairs: list[tuple[str, str]]) -> tuple[str | None, bool | str]:
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


async def read_query(request: Request) -> tuple[str | None, bool | str]:
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
    """``count`` integers of ``name`` from this node's in-memory ranges, in rising order (with a template, their
    texts; for a resetting sequence, of the period the node's clock is in). A gapless sequence's is a 409."""
    count_text, as_strings = await read_query(request)
    n = parse_count(count_text, sequences.max_count)
    public = _public(request.app.state.public, as_strings)
    issued = await sequences.next(name, n, charge=ids_charge(request.scope))
    if public is not None:
        return Response(await public_body(name, issued.runs, *public), media_type="application/json")
    return Response(await issued_body(name, issued, as_strings is True), media_type="application/json")


for _method in ("GET", "POST"):
    router.add_api_route(
        NEXT_ROUTE,
        next_ids,
        methods=[_method],
        response_model=NextOut,
        responses={**ERRORS, **CONFLICT},
        operation_id=f"sequence_next_{_method.lower()}",
        openapi_extra=declare("sequences", hands_out_ids=True),
    )


@router.post(
    RANGE_ROUTE,
    openapi_extra=declare("sequences", hands_out_ids=True),
    response_model=RangeOut,
    responses={**ERRORS, **CONFLICT},
)
async def reserve_range(
    name: str,
    sequences: SequencesDep,
    request: Request,
    count: str | None = CountQ,
    format: str | None = FormatQ,  # the parameter's name in the API (documented; read by read_query)
) -> Response:
    """A fresh contiguous range of ``count`` integers (1..2**40) reserved in storage, for offline jobs (of the
    current period, for a resetting sequence). A gapless sequence's is a 409."""
    count_text, as_strings = await read_query(request)
    _no_public_range(as_strings)
    n = parse_count(count_text, MAX_RANGE_COUNT)
    reserved = await sequences.reserve_range(name, n, charge=ids_charge(request.scope, within_quota=True))
    return Response(range_body(name, reserved, as_strings is True), media_type="application/json")


@router.get("/v1/sequences/{name}/parse/{text:path}", openapi_extra=declare("sequences"), responses=ERRORS)
async def parse_number(name: str, text: str, sequences: SequencesDep) -> dict[str, Any]:
    """Read a number the sequence's template rendered (or one of its former templates): its period and integer,
    its check digit checked (a 422 naming the rule otherwise), and its state: ``unused``, ``reserved`` (a cached
    sequence's), or a gapless one's ``outstanding``, ``voided`` or ``committed``. ``/`` in a number is fine
    (``FV/26/11/0007``)."""
    return await sequences.parse(name, text)


@router.get("/v1/sequence-numbers/{text:path}", openapi_extra=declare("sequences"))
async def read_number(text: str, sequences: SequencesDep) -> dict[str, Any]:
    """Which sequences' templates read ``text`` (the decode page asks this for text no ID scheme reads):
    ``{"text", "readings": [...]}``, each reading as ``GET /v1/sequences/{name}/parse/{text}`` answers it; no
    reading is no error."""
    return {"text": text, "readings": await sequences.read(text)}


def _who(request: Request, sequences: SequenceService) -> Who:
    client = request.scope.get("client")
    return Who(key_name(request.scope), sequences.node, str(client[0]) if client else None)


@router.post(
    "/v1/sequences/{name}/reserve",
    response_model=ReservationOut,
    responses={**ERRORS, **CONFLICT},
    openapi_extra=declare(
        "sequences",
        hands_out_ids=True,
        requestBody={"content": {"application/json": {"schema": ReserveIn.model_json_schema()}}},
    ),
)
async def reserve(name: str, request: Request, sequences: SequencesDep) -> dict[str, Any]:
    """Reserve the next integer of a gapless sequence (a voided or expired one first) until ``ttl_s`` seconds
    from now (default 60, 1..3600); commit or void it by its ``reservation``. Uncommitted at its expiry, it is
    voided by the fleet."""
    raw = await read_body(request)
    body = parse_body(raw, ReserveIn, '{"ttl_s": T}') if raw.strip() else ReserveIn(ttl_s=TTL_DEFAULT_S, period=None)
    charge = ids_charge(request.scope)
    return await sequences.reserve(name, body.ttl_s, _who(request, sequences), body.period, charge=charge)


@router.post(
    "/v1/sequences/{name}/commit",
    response_model=SettledOut,
    responses={**ERRORS, **CONFLICT},
    openapi_extra=declare(
        "sequences",
        requestBody={"required": True, "content": {"application/json": {"schema": CommitIn.model_json_schema()}}},
    ),
)
async def commit(name: str, request: Request, sequences: SequencesDep) -> dict[str, Any]:
    """Make a reservation's integer final. A 409 names why when it cannot: it expired, or was voided (its integer
    went back to be reserved again). Committing twice answers as the first time."""
    body = parse_body(await read_body(request), CommitIn, '{"reservation": "..."}')
    return await sequences.settle(name, body.reservation, "committed", _who(request, sequences))


@router.post(
    "/v1/sequences/{name}/void",
    response_model=SettledOut,
    responses={**ERRORS, **CONFLICT},
    openapi_extra=declare(
        "sequences",
        requestBody={"required": True, "content": {"application/json": {"schema": VoidIn.model_json_schema()}}},
    ),
)
async def void(name: str, request: Request, sequences: SequencesDep) -> dict[str, Any]:
    """Give a reservation's integer back: it is the next one reserved. A 409 when it was committed."""
    body = parse_body(await read_body(request), VoidIn, '{"reservation": "...", "reason": "..."}')
    return await sequences.settle(name, body.reservation, "voided", _who(request, sequences), body.reason)


@router.get("/v1/sequences/{name}/audit", responses=ERRORS, openapi_extra=declare("admin"))
async def audit(
    name: str,
    sequences: SequencesDep,
    after: str | None = Query(None, description="The cursor a previous page answered as next."),
    limit: int = Query(AUDIT_PAGE_DEFAULT, description=f"Events per page, 1..{AUDIT_PAGE_MAX}."),
    period: str | None = Query(None, description="Only this period's events (2026-11-27; never)."),
) -> dict[str, Any]:
    """Every reserve, commit, void and expiry of a gapless sequence, oldest first, with who (API key name, node,
    client address) and when; kept IDMINT_LEDGER_DAYS (also for a deleted sequence)."""
    return await sequences.audit(name, after, limit, period)


@router.get("/v1/sequences/{name}/holes", responses={**ERRORS, **CONFLICT}, openapi_extra=declare("admin"))
async def holes(
    name: str,
    sequences: SequencesDep,
    period: str | None = Query(None, description="The period's first day (2026-11-01); default the current one."),
) -> dict[str, Any]:
    """A gapless sequence's holes in one period, for the auditor: the integers voided (or expired) and not reserved
    again, the reservations still open, and totals; the period's ``state`` (``current``, ``grace``: a reservation
    in it may still refill a hole, ``closed``: the holes are final; ``never`` for a sequence that never resets)."""
    return await sequences.holes(name, period)


# -- bodies ----------------------------------------------------------------------------------------------------------


async def next_body(name: str, runs: Runs, count: int, as_strings: bool = False) -> bytes:
    """``{"name": ..., "ids": [...]}`` (the integers as strings with ``as_strings``); large answers are written in
    a worker thread."""
    digits = encode_runs(runs) if count < THREAD_ENCODE_MIN else await off_loop(encode_runs, runs)
    if as_strings:  # decimal digits never hold a comma or a quote: quoting is one replace
        digits = b'"' + digits.replace(b",", b'","') + b'"'
    return b'{"name":"' + name.encode() + b'","ids":[' + digits + b"]}"


async def issued_body(name: str, issued: Issued, as_strings: bool = False) -> bytes:
    """:func:`next_body`, and for a resetting or templated sequence ``"text": [...]`` (with a template) and
    ``"period"`` (its first day, null for a sequence that never resets)."""
    body = await next_body(name, issued.runs, issued.count, as_strings)
    if not issued.business:
        return body
    extra = b""
    bound = issued.bound
    if bound is not None:
        texts = (
            _texts(bound, issued.runs) if issued.count < THREAD_TEXT_MIN else await off_loop(_texts, bound, issued.runs)
        )
        extra += b',"text":[' + texts + b"]"
    period = b"null" if issued.period is None else b'"' + issued.period.encode() + b'"'
    return body[:-1] + extra + b',"period":' + period + b"}"


def _texts(bound: Any, runs: Runs) -> bytes:
    return b",".join(bound.encode(first, count, step) for first, count, step in runs)


def range_body(name: str, reserved: Reserved, as_strings: bool = False) -> bytes:
    """``{"name", "first", "last", "count"}`` (plus ``increment`` and ``period`` for a business sequence);
    ``first`` and ``last`` as strings with ``as_strings`` (``count``, at most 2**40, stays a number)."""
    q = b'"' if as_strings else b""
    first, last, count = reserved.first, reserved.last, reserved.count
    body = b'{"name":"%s","first":%s%d%s,"last":%s%d%s,"count":%d' % (name.encode(), q, first, q, q, last, q, count)
    if reserved.business:
        period = b"null" if reserved.period is None else b'"' + reserved.period.encode() + b'"'
        body += b',"increment":%d,"period":%s' % (reserved.step, period)
    return body + b"}"


def _public(public: Public | None, form: bool | str) -> tuple[Public, Any] | None:
    """(the public forms, the key ring in force) for ``format=public``, else None; InvalidOptionError naming the
    key file setting when there is none (checked before any integer is taken)."""
    if form != PUBLIC_FORMAT:
        return None
    if public is None:
        raise InvalidOptionError("format=public is not served by this app")
    return public, public.ring()


def _no_public_range(form: bool | str) -> None:
    if form == PUBLIC_FORMAT:
        raise InvalidOptionError(
            "format=public is not available on range: a range's public form is no range (the public texts of "
            "first..last do not follow one another); take the integers with next?format=public"
        )


async def public_body(name: str, runs: Runs, public: Public, ring: Any) -> bytes:
    """``{"name": ..., "ids": [public texts]}``: no template text and no period (they show what the public form
    hides)."""
    values = [first + k * step for first, count, step in runs for k in range(count)]
    lines = public.sequence_lines(ring, values)
    return b'{"name":"' + name.encode() + b'","ids":["' + lines[:-1].replace(b"\n", b'","') + b'"]}'


def _json(payload: dict[str, Any], status: int) -> Response:
    return Response(json.dumps(payload, separators=(",", ":")), status_code=status, media_type="application/json")


# -- the hot routes ------------------------------------------------------------------------------------------------


def _query(raw: bytes) -> tuple[str | None, bool | str]:
    """:func:`sequence_query` of a raw query string, read as the FastAPI routes read it
    (:func:`~app.api.params.split_query`); a plain ``count=N`` skips the split."""
    if not raw:
        return None, False
    if raw.startswith(b"count=") and not any(c in raw for c in (b"&", b"%", b"+")):
        return raw[6:].decode("latin-1"), False
    return sequence_query(split_query(raw))


def hot_next(service: SequenceService, public: Public | None = None) -> HotHandler:
    """The hot handler of ``GET /v1/sequences/{name}/next``: the same query reader, count parser, service and body
    as :func:`next_ids`, without FastAPI (the front refuses a body before it runs)."""

    async def answer(name: str, scope: Scope) -> Answer:
        count_text, as_strings = _query(scope["query_string"])
        count = parse_count(count_text, service.max_count)
        keyed = _public(public, as_strings)
        charge = ids_charge(scope)
        if keyed is not None:
            return 200, await public_body(name, (await service.next(name, count, charge=charge)).runs, *keyed), []
        runs = service.next_now(name, count, charge=charge)
        if runs is None:
            issued = await service.next(name, count, charge=charge)
            return 200, await issued_body(name, issued, as_strings is True), []
        return 200, await next_body(name, runs, count, as_strings is True), []

    return answer


def hot_range(service: SequenceService) -> HotHandler:
    """The hot handler of a body-less ``POST /v1/sequences/{name}/range`` (as :func:`reserve_range`)."""

    async def answer(name: str, scope: Scope) -> Answer:
        count_text, as_strings = _query(scope["query_string"])
        _no_public_range(as_strings)
        count = parse_count(count_text, MAX_RANGE_COUNT)
        reserved = await service.reserve_range(name, count, charge=ids_charge(scope, within_quota=True))
        return 200, range_body(name, reserved, as_strings is True), []

    return answer
