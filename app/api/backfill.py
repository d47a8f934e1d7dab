"""``POST /v1/ids/{scheme}/backfill``: one ID per past time, in the order asked (:mod:`app.issuing.backfill`).

The body is a JSON object: ``times`` (1..10,000 RFC 3339 date-times, each with ``Z`` or an explicit offset), plus
``format`` and the scheme's issue options, as ``POST /v1/ids/{scheme}`` takes them (also accepted in the query).
The answer is ``{"scheme", "format", "ids": [...]}``. API-key scope ``backfill`` (not granted by ``issue``).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import AwareDatetime, BeforeValidator, TypeAdapter, ValidationError
from starlette.responses import Response

from app.api.access import declare
from app.api.auth import ids_charge
from app.api.deps import NodeDep, SettingsDep
from app.api.params import json_object, parse_issue, query_params, read_body
from app.errors import InvalidOptionError
from app.issuing.backfill import TIMES_MAX
from app.schemes.base import PUBLIC_FORMAT

router = APIRouter(tags=["issue"])

TIME_RULE = "an RFC 3339 date-time with Z or an explicit offset (2021-03-04T05:06:07.890Z)"
_DATE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}", re.ASCII)
MAX_BACKFILL_BODY_BYTES = TIMES_MAX * 64 + 16_384
"""Largest body of a backfill request: 10,000 times of up to 64 bytes each, and the issue parameters."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _rfc3339(value: object) -> object:
    if not isinstance(value, str) or _DATE_TIME.match(value) is None:
        raise ValueError(f"must be {TIME_RULE}")
    return value


_TIMES = TypeAdapter(list[Annotated[AwareDatetime, BeforeValidator(_rfc3339)]])


def parse_times(value: object) -> list[int]:
    """``times`` as ns since the Unix epoch (µs precision, as RFC 3339 parsing by pydantic gives). Raises
    InvalidOptionError naming the rule and the first time that breaks it."""
    if not isinstance(value, list):
        raise InvalidOptionError(f"times must be a JSON array of 1..{TIMES_MAX} RFC 3339 date-times")
    if not 1 <= len(value) <= TIMES_MAX:
        raise InvalidOptionError(f"times must hold 1..{TIMES_MAX} RFC 3339 date-times, got {len(value)}")
    try:
        parsed = _TIMES.validate_python(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = err.get("loc", ("?",))[0]
        shown = str(err.get("input"))[:80]
        raise InvalidOptionError(f"times[{where}] must be {TIME_RULE}, got {shown!r}") from None
    return [(moment - _EPOCH) // _MICROSECOND * 1000 for moment in parsed]


async def backfill(scheme: str, http: Request, node: NodeDep, settings: SettingsDep) -> Response:
    """One ID of ``scheme`` per time of ``times``, in order, each decoding to its time at the scheme's precision."""
    params: dict[str, Any] = query_params(http.query_params.multi_items())
    body = await read_body(http, MAX_BACKFILL_BODY_BYTES)
    members = json_object(body, '{"times": [...]} (a JSON object in UTF-8)')
    twice = sorted(set(members) & set(params))
    if twice:
        raise InvalidOptionError(f"{', '.join(twice)} given both in the query and in the body")
    params.update(members)
    if "times" not in params:
        raise InvalidOptionError('the body must carry times: {"times": ["2021-03-04T05:06:07.890Z", ...]}')
    if "count" in params:
        raise InvalidOptionError("backfill takes times, not count: one ID per time")
    times = parse_times(params.pop("times"))
    backfiller = node.backfiller
    target = backfiller.scheme(scheme)
    request = parse_issue(target, params, settings.max_count, counted_by="times")
    if request.format == PUBLIC_FORMAT:
        raise InvalidOptionError("format=public is not available for backfill")
    ids_charge(http.scope)(len(times))
    values = await backfiller.backfill(scheme, times, request.options)
    node.metrics.scheme(target.name).backfilled(len(values))
    ids = [target.format(value, request.format) for value in values]
    answer = {"scheme": target.name, "format": request.format, "ids": ids}
    return Response(json.dumps(answer, separators=(",", ":")), media_type="application/json")


router.add_api_route(
    "/v1/ids/{scheme}/backfill",
    backfill,
    methods=["POST"],
    responses={
        404: {"description": "unknown scheme"},
        409: {"description": "a tick's backfill capacity is spent, or backfill of the scheme is off (detail says)"},
        413: {"description": "request body too large"},
        422: {"description": "a time or option breaks a rule (detail names it)"},
        503: {"description": "storage cannot be used now (Retry-After)"},
    },
    operation_id="backfill_post",
    openapi_extra=declare(
        "backfill",
        hands_out_ids=True,
        requestBody={
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["times"],
                        "properties": {
                            "times": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": TIMES_MAX,
                                "items": {"type": "string", "format": "date-time"},
                                "description": "Past times, RFC 3339 with Z or an offset; one ID per time, in order.",
                            },
                            "format": {"type": "string", "description": "Text form, as the issue route takes it."},
                        },
                        "additionalProperties": {"type": "string"},
                    }
                }
            },
        },
    ),
)
