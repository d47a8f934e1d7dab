"""Decoding routes: one scheme, scheme detection, and free text (log lines) for the support page."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from app.api.deps import NodeDep
from app.api.params import query_params
from app.decoding import decode_any, decode_one, decode_text

router = APIRouter(tags=["decode"])

MAX_TEXT_CHARS = 1_000_000


class DecodeObject(BaseModel):
    scheme: str
    id: str = Field(description="The canonical text form.")
    hex: str = Field(description="The packed bytes, lowercase hex.")
    timestamp: str | None = Field(description="Creation time, RFC 3339 UTC, at the scheme's precision.")
    fields: dict[str, Any]


class DescribedDecodeObject(DecodeObject):
    words: dict[str, str] = Field(description="What each field says, in words (fields left out: their value).")
    summary: str = Field(description="One line in words about the ID's maker.")


class Candidates(BaseModel):
    input: str
    candidates: list[DecodeObject]


class TextRequest(BaseModel):
    text: str = Field(max_length=MAX_TEXT_CHARS, description="Any text: IDs, log lines, one or many lines.")


class TextItem(BaseModel):
    line: int
    input: str
    candidates: list[DescribedDecodeObject]
    error: str | None


class TextResponse(BaseModel):
    items: list[TextItem]
    truncated: bool


@router.get("/v1/decode/{scheme}/{id}", response_model=DecodeObject,
            responses={404: {"description": "unknown scheme"}, 422: {"description": "the rule the ID breaks"}})
async def decode_scheme(scheme: str, id: str, request: Request, node: NodeDep) -> dict[str, Any]:
    """Decode ``id`` (any accepted text form of ``scheme``) into its fields. Query parameters are the scheme's
    decode options (see ``decode_options`` in /v1/schemes); any other is a 422."""
    options = query_params(request.query_params.multi_items())
    return decode_one(scheme, id, node.schemes, options)


@router.get("/v1/decode/{id}", response_model=Candidates,
            responses={422: {"description": "no scheme accepts the ID"}})
async def decode_detect(id: str, node: NodeDep) -> dict[str, Any]:
    """Decode ``id`` as every scheme whose parser accepts it (an ID can be valid in more than one)."""
    return decode_any(id, registry=node.schemes)


@router.post("/v1/decode", response_model=TextResponse)
async def decode_free_text(body: TextRequest, node: NodeDep) -> dict[str, Any]:
    """Pick the ID-shaped tokens out of free text (log lines, tickets) and decode each, with each reading's
    fields in words and a one-line summary (what the decode page shows)."""
    return decode_text(body.text, registry=node.schemes)
