"""``GET /v1/bounds/{scheme}``: the range of a scheme's IDs made in a time interval, for a range query on a column
of IDs (:mod:`app.bounds`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from app.api.access import declare
from app.api.deps import NodeDep
from app.api.params import query_params
from app.bounds import COLUMN_RULE, DIALECTS, TIME_RULE, time_bounds
from app.schemes import get_scheme
from app.schemes.time_order import STORAGES

router = APIRouter(tags=["decode"])


class BoundsObject(BaseModel):
    scheme: str
    from_: str = Field(alias="from", description="The interval's start (inclusive), RFC 3339 UTC.")
    to: str = Field(description="The interval's end (exclusive), RFC 3339 UTC.")
    storage: str = Field(description=f"The column type: one of {', '.join(STORAGES)}.")
    form: str = Field(description="The value form the column holds (a text form, a byte size, signed/decimal).")
    lower: str = Field(description="The smallest value of an ID made at or after `from`, in the column's form.")
    upper: str | None = Field(
        description="The smallest value of an ID made at or after `to`; null when no ID of the scheme is that new "
        "(the predicate then has no upper bound)."
    )
    sql: str = Field(description="The predicate `column >= lower AND column < upper` in the dialect's literals.")
    dialect: str
    resolution_ns: int | float = Field(description="The timestamp's unit in ns (1e6 for ms; KSUID 1e9: coarse).")
    read_as: str = Field(description="What the IDs were read as (snowflake: the layout; eight-byte: the mode).")
    note: str = Field(description="What to know about this answer (coarse time, other IDs in the column), or ''.")
    storages: list[str] = Field(description="Every column type the scheme's IDs sort by time in.")


DESCRIPTION = (
    "Which IDs of `scheme` were made in `[from, to)`: `lower <= id < upper` in the column's order, and the SQL "
    f"predicate for a column named `column` (default `id`). `from` and `to`: {TIME_RULE}. `storage`: the column type "
    f"(default the scheme's first; `storages` lists them). `dialect`: {', '.join(DIALECTS)} (SQLite: uuid and bytea "
    f"as BLOBs; MySQL/MariaDB: as BINARY(16)/VARBINARY, text compared as bytes). `column`: {COLUMN_RULE}. The "
    "scheme's own parameters: snowflake `layout` (default the node's), "
    "eight-byte `mode` (time_sequential: the spread mode does not sort by time), TypeID `type` (the prefix of a text "
    "column's IDs). Any other parameter is a 422."
)


@router.get(
    "/v1/bounds/{scheme}",
    openapi_extra=declare("decode"),
    response_model=BoundsObject,
    response_model_by_alias=True,
    description=DESCRIPTION,
    responses={
        404: {"description": "unknown scheme"},
        422: {"description": "the rule a parameter breaks, or why the scheme's IDs do not sort by time"},
    },
)
async def bounds(scheme: str, request: Request, node: NodeDep) -> dict[str, Any]:
    """The bounds of ``scheme``'s IDs in a time interval (:func:`app.bounds.time_bounds`)."""
    get_scheme(scheme)  # UnknownSchemeError (404) names the known schemes
    params = query_params(request.query_params.multi_items())
    return time_bounds(node.schemes[scheme], params)
