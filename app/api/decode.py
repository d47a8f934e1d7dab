"""Decoding routes: one scheme, scheme detection, and free text (log lines) for the support page."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from app.decoding import decode_any, decode_one, decode_text

router = APIRouter(tags=["decode"])

MAX_TEXT_CHARS = 1_000_000
MAX_TEXT_ITEMS = 5000
"""IDs decoded from one text at most; the scan stops there (``truncated`` says so)."""
TEXT_DECODE_THREADS = 2
"""Free-text decoding runs on this many threads at most, off the event loop; more requests queue for them."""

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _text_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(TEXT_DECODE_THREADS, thread_name_prefix="idmint-decode-text")
        return _pool


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
    model_config = ConfigDict(extra="forbid")  # an unknown member is a 422, never silently ignored

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


def _decode_text_json(text: str) -> bytes:
    return TextResponse.model_validate(decode_text(text, MAX_TEXT_ITEMS)).model_dump_json().encode()


@router.post("/v1/decode", response_model=TextResponse)
async def decode_free_text(body: TextRequest) -> Response:
    """Pick the ID-shaped tokens out of free text (log lines, tickets) and decode each (at most 5,000; then
    ``truncated`` is true). The work runs on a small thread pool, off the event loop."""
    loop = asyncio.get_running_loop()
    payload = await loop.run_in_executor(_text_pool(), _decode_text_json, body.text)
    return Response(payload, media_type="application/json")
