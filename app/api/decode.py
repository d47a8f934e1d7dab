"""Decoding routes: one scheme, scheme detection, and free text (log lines) for the support page."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.decoding import decode_any, decode_one, decode_text

router = APIRouter(tags=["decode"])

MAX_TEXT_CHARS = 1_000_000


class DecodeObject(BaseModel):
    scheme: str
    id: str = Field(description="The canonical text form.")
    hex: str = Field(description="The packed bytes, lowercase hex.")
    timestamp: str | None = Field(description="Creation time, RFC 3339 UTC, at the scheme's precision.")
    fields: dict[str, Any]


class Candidates(BaseModel):
    input: str
    candidates: list[DecodeObject]


class TextRequest(BaseModel):
    text: str = Field(max_length=MAX_TEXT_CHARS, description="Any text: IDs, log lines, one or many lines.")


class TextItem(BaseModel):
    line: int
    input: str
    candidates: list[DecodeObject]
    error: str | None


class TextResponse(BaseModel):
    items: list[TextItem]
    truncated: bool


@router.get("/v1/decode/{scheme}/{id}", response_model=DecodeObject,
            responses={404: {"description": "unknown scheme"}, 422: {"description": "the rule the ID breaks"}})
async def decode_scheme(scheme: str, id: str) -> dict[str, Any]:
    """Decode ``id`` (any accepted text form of ``scheme``) into its fields."""
    return decode_one(scheme, id)


@router.get("/v1/decode/{id}", response_model=Candidates,
            responses={422: {"description": "no scheme accepts the ID"}})
async def decode_detect(id: str) -> dict[str, Any]:
    """Decode ``id`` as every scheme whose parser accepts it (an ID can be valid in more than one)."""
    return decode_any(id)


@router.post("/v1/decode", response_model=TextResponse)
async def decode_free_text(body: TextRequest) -> dict[str, Any]:
    """Pick the ID-shaped tokens out of free text (log lines, tickets) and decode each."""
    return decode_text(body.text)
