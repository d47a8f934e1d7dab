"""Public IDs, shared by both clients (no I/O): ``format="public"`` on issuing and on a sequence's ``next``, and
reading public IDs back (``GET /v1/public/{text}``, ``POST /v1/public``). docs/public-ids.md states the forms.

A public ID is a keyed mask of an internal ID: it keeps no order and is no integer. So the answer checks that rely
on order or on integers do not apply to it: an answer of public IDs is checked against the form's token pattern
(``/v1/schemes``' ``token_patterns["public"]``), for repeats within the answer and against the recent IDs of the
same scheme and options (the recent-ID rule, on the texts), never for rising order; a sequence's public texts are
checked for their shape and against the recent texts of the same sequence, never as integers or intervals.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from idmint_client._models import Decoded
from idmint_client._replicas import Failed

PUBLIC_FORMAT = "public"
"""The ``format`` of public IDs."""
PUBLIC_PATH = "/v1/public"
MAX_REVEAL_TEXTS = 10_000
"""Most texts one ``POST /v1/public`` reads: :meth:`~idmint_client.Client.reveal_many` splits above it."""
KEY_ID_MAX = 15
PUBLIC_SEQUENCE_TEXT = re.compile(r"[0-9A-HJKMNP-TV-Z]{17}[1-9A-F]")
"""A sequence integer's public text: 17 Crockford base32 characters, then the key id (1..F)."""


@dataclass(frozen=True)
class Revealed:
    """A public ID read back (``GET /v1/public/{text}``, an item of ``POST /v1/public``).

    ``text``: the public ID asked; ``id``: the internal ID in its scheme's canonical form (a sequence integer's
    decimal digits); ``scheme``: its scheme, or ``"sequence"`` (the text does not say which sequence); ``key_id``:
    the key (1..15) that opened it; ``decoded``: the ID's decode reading (as :meth:`~idmint_client.Client.decode`
    gives it; None for a sequence integer).
    """

    text: str
    id: str
    scheme: str
    key_id: int
    decoded: Decoded | None


@dataclass(frozen=True)
class Unrevealed:
    """An item of :meth:`~idmint_client.Client.reveal_many` that no key in force opens: ``error`` says why."""

    text: str
    error: str


def reveal_path(text: str) -> str:
    return f"{PUBLIC_PATH}/{quote(text, safe='')}"


def _revealed(text: str, item: Mapping[str, Any]) -> Revealed:
    """One opened item; Failed when it is not what the API promises."""
    ident, scheme, key_id, decoded = item.get("id"), item.get("scheme"), item.get("key_id"), item.get("decoded")
    if not isinstance(ident, str) or not isinstance(scheme, str) or not ident or not scheme:
        raise Failed(f"reveal answer for {text[:40]!r} has no id and scheme: {str(item)[:120]}")
    if type(key_id) is not int or not 1 <= key_id <= KEY_ID_MAX:
        raise Failed(f"reveal answer for {text[:40]!r} has key_id {key_id!r}, not 1..{KEY_ID_MAX}")
    if decoded is not None and not isinstance(decoded, dict):
        raise Failed(f"reveal answer for {text[:40]!r} has a decoded reading that is not an object")
    try:
        reading = Decoded.from_json(decoded) if decoded is not None else None
    except (KeyError, TypeError, ValueError) as exc:
        raise Failed(f"reveal answer for {text[:40]!r} has an unreadable decoded reading: {exc!r}") from exc
    return Revealed(text, ident, scheme, key_id, reading)


def parse_reveal(response: httpx.Response, text: str) -> Revealed:
    """The answer of ``GET /v1/public/{text}``. Failed for one that is not."""
    try:
        body = response.json()
    except ValueError as exc:
        raise Failed(f"unreadable reveal answer: {exc!r}") from exc
    if not isinstance(body, dict):
        raise Failed("reveal answer is not an object")
    return _revealed(text, body)


def parse_reveal_many(response: httpx.Response, texts: Sequence[str]) -> list[Revealed | Unrevealed]:
    """The answer of ``POST /v1/public`` for ``texts``: one item per text, in order. Failed for one that is not."""
    try:
        items = response.json()["items"]
    except (ValueError, KeyError, TypeError) as exc:
        raise Failed(f"unreadable reveal answer: {exc!r}") from exc
    if not isinstance(items, list) or len(items) != len(texts):
        size = len(items) if isinstance(items, list) else "?"
        raise Failed(f"reveal answer holds {size} items for {len(texts)} texts")
    out: list[Revealed | Unrevealed] = []
    for text, item in zip(texts, items, strict=True):
        if not isinstance(item, dict):
            raise Failed(f"reveal answer's item for {text[:40]!r} is not an object")
        error = item.get("error")
        if error is not None:
            if not isinstance(error, str):
                raise Failed(f"reveal answer's error for {text[:40]!r} is not a string")
            out.append(Unrevealed(text, error))
        else:
            out.append(_revealed(text, item))
    return out


def parse_public_next(response: httpx.Response, name: str, count: int) -> list[str]:
    """The ``ids`` of a ``next`` answer with ``format=public``: ``count`` public texts, each of the 64-bit public
    form, none twice. Failed else."""
    try:
        body = response.json()
        ids = body["ids"]
        named = body["name"]
    except (ValueError, KeyError, TypeError) as exc:
        raise Failed(f"unreadable next answer: {exc!r}") from exc
    if named != name or not isinstance(ids, list) or len(ids) != count:
        size = len(ids) if isinstance(ids, list) else "?"
        raise Failed(f"next answer for {named!r} holds {size} public IDs; asked {count} of {name!r}")
    for number, one in enumerate(ids, 1):
        if not isinstance(one, str) or not PUBLIC_SEQUENCE_TEXT.fullmatch(one):
            raise Failed(f"public ID {number} is not a sequence integer's public text: {str(one)[:40]!r}")
    return ids


def reveal_many_parser(texts: Sequence[str]) -> Callable[[httpx.Response], list[Revealed | Unrevealed]]:
    """:func:`parse_reveal_many` of ``texts``, as a call's parser."""
    return lambda response: parse_reveal_many(response, texts)


def public_params(count: int, fmt: str) -> dict[str, str]:
    """The query of a sequence's ``next`` in form ``fmt``: ``public`` only (ValueError else: the other forms are
    :meth:`~idmint_client.Client.next`'s integers)."""
    if fmt != PUBLIC_FORMAT:
        raise ValueError(f"format must be {PUBLIC_FORMAT!r} (or None: the integers), got {fmt!r}")
    return {"count": str(count), "format": PUBLIC_FORMAT}


def public_sequence_key(name: str) -> tuple[str, str]:
    """The repeat-check key of a sequence's public texts (:class:`~idmint_client._repeats.Repeats`)."""
    return ("sequence:" + name, PUBLIC_FORMAT)
