"""Revealing public IDs: ``GET /v1/public/{text}`` and ``POST /v1/public`` (scope ``decode``).

Each text is read back under the keys in force (:mod:`app.public`): ``{"id": <the internal ID, canonical>,
"scheme", "key_id", "decoded": <the decode object, null for a sequence integer>}``. A text no key opens is a 404
(one text) or an item ``{"error": ...}`` (a batch, up to :data:`MAX_TEXTS`). A batch is revealed in the encode pool,
off the event loop.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from app.api.access import declare
from app.api.deps import NodeDep
from app.api.issuing import off_loop
from app.api.params import parse_body, read_body
from app.decoding import decode_value
from app.errors import UnopenedPublicIdError
from app.public.forms import Public

router = APIRouter(tags=["public"])

MAX_TEXTS = 10_000
"""Most texts one ``POST /v1/public`` reads."""
MAX_TEXT_CHARS = 128
"""Longest text read as a public ID (the longest, a TypeID with a 63-character prefix, is 90)."""
MAX_BODY_BYTES = MAX_TEXTS * (MAX_TEXT_CHARS + 4) + 64
THREAD_MIN = 64
"""Batches of at least this many texts are revealed in the encode pool (about 20 µs a text)."""


class RevealRequest(BaseModel):
    """The body of ``POST /v1/public``."""

    model_config = ConfigDict(extra="forbid")

    texts: list[str] = Field(max_length=MAX_TEXTS, description=f"Public IDs, at most {MAX_TEXTS:,}.")


class Revealed(BaseModel):
    id: str | None = Field(None, description="The internal ID in its scheme's canonical form.")
    scheme: str | None = Field(None, description='The scheme, or "sequence" for a sequence integer.')
    key_id: int | None = Field(None, description="The id of the key that opened the text.")
    decoded: dict[str, Any] | None = Field(None, description="The decode object (GET /v1/decode), null for a sequence.")
    error: str | None = Field(None, description="Why the text is refused (batch items only).")


class RevealResponse(BaseModel):
    items: list[Revealed]


def _decode(scheme: Any, value: int) -> dict[str, Any]:
    return decode_value(scheme, value)


def reveal_json(public: Public, texts: list[str]) -> bytes:
    """The answer of ``POST /v1/public`` for ``texts`` (pure CPU: run in the encode pool for a large batch)."""
    items = []
    for text, found in zip(texts, public.reveal([t[:MAX_TEXT_CHARS] for t in texts]), strict=True):
        item = public.answer(found, _decode)
        if "error" in item and len(text) > MAX_TEXT_CHARS:
            item = {"error": f"a public ID is at most {MAX_TEXT_CHARS} characters, got {len(text)}"}
        items.append(item)
    return json.dumps({"items": items}, separators=(",", ":")).encode()


@router.get(
    "/v1/public/{text}",
    openapi_extra=declare("decode"),
    response_model=Revealed,
    responses={404: {"description": "no key in force opens the text"}, 422: {"description": "no key file"}},
)
async def reveal_one(text: str, request: Request, node: NodeDep) -> dict[str, Any]:
    """The internal ID behind one public ID, with its decode object."""
    public: Public = request.app.state.public
    found = public.reveal([text[:MAX_TEXT_CHARS]])[0]
    if isinstance(found, str) or len(text) > MAX_TEXT_CHARS:
        raise UnopenedPublicIdError(f"{found if isinstance(found, str) else 'too long for a public ID'}: {text[:40]!r}")
    return public.answer(found, _decode)


@router.post(
    "/v1/public",
    openapi_extra=declare(
        "decode",
        requestBody={
            "required": True,
            "content": {"application/json": {"schema": RevealRequest.model_json_schema()}},
        },
    ),
    response_model=RevealResponse,
    responses={413: {"description": "request body too large"}, 422: {"description": "a malformed body, no key file"}},
)
async def reveal_many(request: Request, node: NodeDep) -> Response:
    """Reveal up to 10,000 public IDs: one item per text, in order (``{"error"}`` for a text no key opens)."""
    public: Public = request.app.state.public
    body = parse_body(await read_body(request, MAX_BODY_BYTES), RevealRequest, '{"texts": [...]}')
    public.ring()  # 422 naming the setting before any work
    work = functools.partial(reveal_json, public, body.texts)
    answer = work() if len(body.texts) < THREAD_MIN else await off_loop(work)
    return Response(answer, media_type="application/json")
