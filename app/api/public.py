"""Revealing public IDs: ``GET /v1/public/{text}`` and ``POST /v1/public`` (scope ``decode``).

Each text is read back under the keys in force (:mod:`app.public`): ``{"id": <the internal ID, canonical>,
"scheme", "key_id", "decoded": <the decode object, null for a sequence integer>}``. A text no key opens is a 404
(one text) or an item ``{"error": ...}`` (a batch, up to :data:`MAX_TEXTS`). A batch is revealed on the event loop
:data:`REVEAL_PER_TURN` texts per turn, so other requests run between slices.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from app.api.access import declare
from app.api.deps import NodeDep
from app.api.params import parse_body, read_body
from app.decoding import decode_value
from app.errors import UnopenedPublicIdError
from app.public.forms import Public
from app.public.keys import KeyRing

router = APIRouter(tags=["public"])

MAX_TEXTS = 10_000
"""Most texts one ``POST /v1/public`` reads."""
MAX_TEXT_CHARS = 128
"""Longest text read as a public ID (the longest, a TypeID with a 63-character prefix, is 90)."""
MAX_BODY_BYTES = MAX_TEXTS * (MAX_TEXT_CHARS + 4) + 64
REVEAL_PER_TURN = 50
"""Texts revealed, decoded and written per turn of the event loop: about half a millisecond here (10 µs a text: the
key trials a third, the decode objects half, their JSON the rest; a text that nearly opens, tried under each key,
11 µs with two keys in force). A 10,000-text batch in the encode pool's thread instead held the GIL against the
event loop for its 100 ms: single IDs asked meanwhile took a median 1.3 to 5.4 ms and up to 27 ms
(docs/serving.md, "Figures behind choices in the code")."""


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


def reveal_members(public: Public, ring: KeyRing, texts: list[str]) -> bytes:
    """The items of ``POST /v1/public``'s answer for ``texts`` under ``ring``, as the members of a JSON array (no
    brackets)."""
    items = []
    for text, found in zip(texts, public.reveal([t[:MAX_TEXT_CHARS] for t in texts], ring), strict=True):
        item = public.answer(found, _decode)
        if "error" in item and len(text) > MAX_TEXT_CHARS:
            item = {"error": f"a public ID is at most {MAX_TEXT_CHARS} characters, got {len(text)}"}
        items.append(item)
    return json.dumps(items, separators=(",", ":"))[1:-1].encode()


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
    ring = public.ring()  # 422 naming the setting before any work; one set of keys for the whole batch
    texts = body.texts
    members = []
    for start in range(0, len(texts), REVEAL_PER_TURN):
        if start:
            await asyncio.sleep(0)  # let every other request run between slices (a SIGHUP's reload too)
        members.append(reveal_members(public, ring, texts[start : start + REVEAL_PER_TURN]))
    return Response(b'{"items":[' + b",".join(members) + b"]}", media_type="application/json")
