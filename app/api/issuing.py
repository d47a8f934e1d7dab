"""Request handling shared by the FastAPI routes and the lean ASGI fast path: validation and response bodies.

Parameters are parsed by :mod:`app.api.params` (one pydantic model per scheme); nothing here knows any scheme.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.api.params import IssueRequest, parse_issue
from app.errors import InvalidOptionError
from app.issuing.issuer import Issued, Issuer
from app.issuing.node import Node
from app.public.forms import Public
from app.schemes._text import json_strings
from app.schemes.base import PUBLIC_FORMAT


def public_wrap(public: Public | None, fmt: str) -> Callable[[Issued], Issued] | None:
    """For ``format=public``: what turns an answer's batches into public texts under the key ring in force now
    (one ring for the whole answer, whatever a SIGHUP does meanwhile); None for any other format. Raises
    InvalidOptionError naming the key file setting when there is none (before any ID is issued)."""
    if fmt != PUBLIC_FORMAT:
        return None
    if public is None:
        raise InvalidOptionError("format=public is not served by this app")
    return functools.partial(public.wrap, public.ring())


def prepare(node: Node, scheme: str, params: Mapping[str, Any], maximum: int) -> tuple[Issuer, IssueRequest]:
    """Validate one issue request: (issuer, parsed request). Raises UnknownSchemeError or InvalidOptionError."""
    issuer = node.issuer(scheme)
    return issuer, parse_issue(issuer.scheme, params, maximum)


THREAD_ENCODE_MIN = 16_384
"""Batches of at least this many IDs are encoded in a worker thread (:func:`answer_body`): 100,000 typeids with a
63-character prefix took 90 ms, all of it on the event loop. Encoders keep their scratch arrays per thread and
batches own their data, so encoding beside the loop's next generate is safe."""


ENCODE_THREADS = 2
_encode_pool = ThreadPoolExecutor(ENCODE_THREADS, thread_name_prefix="idmint-encode")
"""Large answers are encoded here, not in asyncio's default pool: that one writes and fsyncs high-water marks and
sequence records (the embedded backend), which must never queue behind bulk encoding."""


async def off_loop(fn: Callable[..., bytes], *args: Any) -> bytes:
    """``fn(*args)`` in the encode pool (:data:`ENCODE_THREADS` threads), awaited."""
    return await asyncio.get_running_loop().run_in_executor(_encode_pool, fn, *args)


async def answer_body(scheme: str, fmt: str, issued: Issued) -> bytes:
    """:func:`issue_body`, in the encode pool for a batch of THREAD_ENCODE_MIN IDs or more (the large C calls of
    an encoder still hold the GIL, but only one at a time, not the whole batch)."""
    if issued.count < THREAD_ENCODE_MIN:
        return issue_body(scheme, fmt, issued)
    return await off_loop(issue_body, scheme, fmt, issued)


@functools.lru_cache(maxsize=256)
def _head(scheme: str, fmt: str) -> bytes:
    """An issue body's bytes up to its first ID's opening quote (``fmt`` is one the scheme's parser accepted)."""
    return b'{"scheme":"' + scheme.encode() + b'","format":"' + fmt.encode() + b'","ids":['


JSON_ROWS_MIN = 384
"""Batches of at least this many IDs are framed as JSON strings column-wise (:func:`~app.schemes._text.json_strings`);
smaller ones by ``bytes.replace``, whose cost per ID is higher but which has no set-up: the two cost about the same
at 320 of wiji's IDs (docs/serving.md, "Scheme code")."""


def issue_body(scheme: str, fmt: str, issued: Issued) -> bytes:
    """``{"scheme", "format", "ids": [...]}`` (+ scheme extras such as Muid's "bundle"), built without a JSON
    encoder: every text form is ASCII letters, digits, ``-``, ``_`` and ``:``, so no escaping is ever needed.

    A batch of JSON_ROWS_MIN IDs or more that writes its own JSON members (:meth:`Issued.json_members`) gives the
    body's middle directly; other answers' lines are framed here."""
    count = issued.count
    members = issued.json_members(fmt) if count >= JSON_ROWS_MIN else None
    lines = issued.encode(fmt) if members is None else b""
    tail = b"]}"
    extra = issued.extra(fmt)
    if extra:  # a loop: a comprehension's own frame cost a single Muid more than the members it builds
        tail = b"]"
        for key, value in extra.items():
            tail += b',"' + key.encode() + b'":"' + str(value).encode() + b'"'
        tail += b"}"
    if members is not None:
        return b"".join((_head(scheme, fmt), members, tail))
    ids = json_strings(lines, count) if count >= JSON_ROWS_MIN else None
    if ids is None:
        quoted = lines[:-1] if count == 1 else lines[:-1].replace(b"\n", b'","')
        return b"".join((_head(scheme, fmt), b'"', quoted, b'"', tail))
    return b"".join((_head(scheme, fmt), ids, tail))
