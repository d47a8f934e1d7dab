"""Decoding routes: one scheme, scheme detection, and free text (log lines) for the support page."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
from collections.abc import Collection
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from app.api.access import declare
from app.api.deps import NodeDep
from app.api.params import TextRequest, parse_text_body, query_params
from app.decoding import decode_any, decode_one, decode_text, decode_text_items, read_with
from app.errors import InvalidOptionError
from app.issuing.node import Node
from app.ledger.view import LedgerView

router = APIRouter(tags=["decode"])

MAX_TEXT_ITEMS = 5000
"""IDs decoded from one text at most; the scan stops there (``truncated`` says so)."""
INLINE_TEXT_CHARS = 1000
"""Texts up to this long (about ten log lines, under a millisecond of work) are decoded on the event loop."""
INLINE_BODY_BYTES = 8 * INLINE_TEXT_CHARS
"""Bodies up to this long are parsed on the event loop (microseconds); longer ones in the worker process, with
their decoding (json.loads of a 1 MB body takes about 2 ms)."""
ITEMS_PER_TURN = 16
"""Free-text items read back, annotated by the claim ledger and written per turn of the event loop (about a
millisecond of work): a 5,000-item answer's load, annotation and JSON (300 ms and more) in one piece held every other
client's request for as long."""
TEXT_DECODE_PROCESSES = 1
"""Longer texts are decoded in this many worker processes (a thread would still hold the event loop's GIL); more
requests queue for them. The pool starts on first use and stops with the app (:func:`shutdown_text_pool`)."""

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _text_pool() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(TEXT_DECODE_PROCESSES, mp_context=multiprocessing.get_context("spawn"))
        return _pool


def shutdown_text_pool() -> None:
    """Stop the decode worker processes (the app's lifespan calls this on shutdown)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


class DecodeObject(BaseModel):
    scheme: str
    id: str = Field(description="The canonical text form.")
    hex: str = Field(description="The packed bytes, lowercase hex.")
    timestamp: str | None = Field(description="Creation time, RFC 3339 UTC, at the scheme's precision.")
    fields: dict[str, Any]
    region: dict[str, Any] | None = Field(
        None,
        description='The region whose slice holds the identity the ID carries ({"kind", "identity", "region", '
        '"regions"}, by this node\'s IDMINT_REGIONS); null when the layout carries no identity that regions slice, '
        "or the ID was read with decode options (another snowflake layout).",
    )

    issued_by: dict[str, Any] | None = Field(
        None,
        description="For a scheme whose IDs carry a leased identity: the claim ledger's record of the owner whose "
        "claim of that identity covers the ID's timestamp ({record, owner: {host, pid, version, pod?...}, "
        "claimed_at, ended_at, end, lease...}); null when none does (``ledger`` says why) or the scheme carries none.",
    )
    ledger: dict[str, Any] | None = Field(
        None,
        description='The ledger\'s verdict: {"status": "confirmed" | "no_claim" | "future" | "before_ledger" | '
        '"no_ledger", "reason", "words"}; null for a scheme without a leased identity.',
    )
    plausibility: dict[str, Any] | None = Field(
        None,
        description='How plausible this reading is: {"rank": 0 (the ledger confirms it), 1 (dated inside the '
        'fleet\'s lifetime) or 2 (the rest), "reason"}; readings come ordered by rank.',
    )


class DescribedDecodeObject(DecodeObject):
    words: dict[str, str] = Field(description="What each field says, in words (fields left out: their value).")
    summary: str = Field(description="One line in words about the ID's maker.")


class Candidates(BaseModel):
    input: str
    candidates: list[DecodeObject]


class TextItem(BaseModel):
    line: int
    input: str
    candidates: list[DescribedDecodeObject]
    error: str | None


class TextResponse(BaseModel):
    items: list[TextItem]
    truncated: bool


@router.get(
    "/v1/decode/{scheme}/{id}",
    openapi_extra=declare("decode"),
    response_model=DecodeObject,
    responses={404: {"description": "unknown scheme"}, 422: {"description": "the rule the ID breaks"}},
)
async def decode_scheme(scheme: str, id: str, request: Request, node: NodeDep) -> dict[str, Any]:
    """Decode ``id`` (any accepted text form of ``scheme``) into its fields. Query parameters are the scheme's
    decode options (see ``decode_options`` in /v1/schemes); any other is a 422."""
    options = query_params(request.query_params.multi_items())
    decoded = decode_one(scheme, id, node.schemes, options)
    other = node.schemes[scheme].with_decode_options(**options) is not node.schemes[scheme]
    await with_ledger(node, [decoded], {scheme} if other else set())
    return _with_region(node, decoded, other)


@router.get(
    "/v1/decode/{id}",
    openapi_extra=declare("decode"),
    response_model=Candidates,
    responses={422: {"description": "no scheme accepts the ID"}},
)
async def decode_detect(id: str, request: Request, node: NodeDep) -> dict[str, Any]:
    """Decode ``id`` as every scheme whose parser accepts it (an ID can be valid in more than one). Query
    parameters are decode options, each applied to the schemes that declare it (``layout=discord``: snowflake
    readings in Discord's layout); any other is a 422."""
    options = query_params(request.query_params.multi_items())
    registry = read_with(node.schemes, options)
    found = decode_any(id, registry=registry)
    others = {name for name in registry if registry[name] is not node.schemes[name]}
    for candidate in found["candidates"]:
        _with_region(node, candidate, candidate["scheme"] in others)
    found["candidates"] = await with_ledger(node, found["candidates"], others)
    return found


async def with_ledger(node: Node, candidates: list[dict[str, Any]], others: set[str]) -> list[dict[str, Any]]:
    """``candidates`` (decode objects) with the claim ledger's answer (:class:`app.ledger.view.LedgerView`), ordered by
    plausibility. ``others``: schemes read with decode options (another layout: their identities are not ours)."""
    return (await annotate_all(node, [candidates], others))[0]


async def annotate_all(
    node: Node, groups: list[list[dict[str, Any]]], others: Collection[str] = ()
) -> list[list[dict[str, Any]]]:
    """Each group of candidates annotated and ordered (one bounded ledger refresh for all of them)."""
    view = ledger_view(node, others)
    await view.prepare([c for group in groups for c in group])
    return [view.annotate(group) for group in groups]


def ledger_view(node: Node, others: Collection[str] = ()) -> LedgerView:
    """The claim ledger as decode shows it, for one request (``others``: schemes read with decode options)."""
    pools = {name: i.holder.pool for name, i in node.issuers.items() if i.holder.pool is not None}
    return LedgerView(node.ledger, pools, node.schemes, others)


def _with_region(node: Node, decoded: dict[str, Any], other_reading: bool) -> dict[str, Any]:
    """``decoded`` with the region of its identity by this node's slicing; null when decode options read it
    another way (``?layout=``: another layout's worker IDs are not this node's to slice)."""
    decoded["region"] = None if other_reading else node.identity_region(decoded["scheme"], decoded["fields"])
    return decoded


def decode_body_items(raw: bytes, limit: int, settings: Any) -> tuple[list[bytes], bool]:
    """Parse a ``POST /v1/decode`` body (:func:`~app.api.params.parse_text_body`) and decode its text as the
    answer's items (:func:`~app.decoding.decode_text_items`): the worker process's whole job for a long body. Raises
    InvalidOptionError (it crosses the process boundary as itself)."""
    return decode_text_items(parse_text_body(raw), limit, settings)


@router.post(
    "/v1/decode",
    response_model=TextResponse,
    responses={422: {"description": "the body breaks a rule (the message names it)"}},
    openapi_extra=declare(
        "decode",
        requestBody={
            "required": True,
            "content": {"application/json": {"schema": TextRequest.model_json_schema()}},
        },
    ),
)
async def decode_free_text(request: Request, node: NodeDep) -> Response:
    """Pick the ID-shaped tokens out of free text (log lines, tickets) and decode each, with each reading's
    fields in words and a one-line summary (what the decode page shows): at most 5,000 (then ``truncated`` is
    true). The body is ``{"text": "..."}`` (one member, once). Texts over a thousand characters are parsed and
    decoded in a worker process, off the event loop. It takes no query parameters (a 422 names them)."""
    if request.query_params:
        names = ", ".join(sorted(set(request.query_params)))
        raise InvalidOptionError(f"POST /v1/decode takes no query parameters, got {names}")
    raw = await request.body()
    loop = asyncio.get_running_loop()
    if len(raw) > INLINE_BODY_BYTES:
        found = await loop.run_in_executor(_text_pool(), decode_body_items, raw, MAX_TEXT_ITEMS, node.settings)
        return await _text_answer(node, *found)
    text = parse_text_body(raw)
    if len(text) <= INLINE_TEXT_CHARS:
        answer = decode_text(text, MAX_TEXT_ITEMS, node.schemes)
        return await _text_answer(node, answer["items"], answer["truncated"])
    found = await loop.run_in_executor(_text_pool(), decode_text_items, text, MAX_TEXT_ITEMS, node.settings)
    return await _text_answer(node, *found)


async def _text_answer(node: Node, items: list[dict[str, Any]] | list[bytes], truncated: bool) -> Response:
    """The free-text answer (``items``: decoded, or each as its JSON text from the worker process) with each item's
    readings annotated by the claim ledger and ordered by plausibility: read, annotated and written
    :data:`ITEMS_PER_TURN` items per turn of the event loop, with one ledger refresh for all of them."""
    view = ledger_view(node)
    loaded: list[dict[str, Any]] = []
    newest = -1
    for start in range(0, len(items), ITEMS_PER_TURN):
        if start:
            await asyncio.sleep(0)
        for item in items[start : start + ITEMS_PER_TURN]:
            loaded.append(json.loads(item) if isinstance(item, bytes) else item)
            newest = max(newest, view.newest(loaded[-1]["candidates"]))
    await view.refresh(newest)
    parts = [b'{"items":[']
    for start in range(0, len(loaded), ITEMS_PER_TURN):
        await asyncio.sleep(0)
        for item in loaded[start : start + ITEMS_PER_TURN]:
            item["candidates"] = view.annotate(item["candidates"])
            parts += (json.dumps(item, separators=(",", ":")).encode(), b",")
    if loaded:
        parts.pop()  # the last item's comma
    parts.append(b'],"truncated":true}' if truncated else b'],"truncated":false}')
    return Response(b"".join(parts), media_type="application/json")
