"""Sequences, shared by both clients (no I/O): paths, the answers of ``next`` and ``range`` read into Python ints,
and the rule that a client's servers keep one set of sequences; the answers of a business sequence's texts,
``parse``, and gapless ``reserve``, ``commit`` and ``void``.

Both calls ask for ``format=string`` (the integers as JSON strings, exact in any JSON reader) and hand back Python
ints. An answer that is not what the API promises (not strings of decimal digits, not rising, another count, past
2**63-1) fails its server, which is moved on from like a dead one. A call retried on another server after a lost
answer leaves a gap in the sequence, never a repeat: the server that did not answer reserved those integers for a
caller that never saw them. A gapless ``reserve`` retried the same way leaves a reservation nobody holds: it
expires, and its integer is the next one reserved. ``commit`` and ``void`` may be retried anywhere: a repeat
answers as the first did (for the server's latest 128 settlements of the period; older, a 409 that the audit log
settles).

A sequence lives in one fleet's storage (its etcd namespace or its state directory). Servers of two fleets each
issue their own ``orders`` from 1: a client given servers of two fleets (two regions) raises
:class:`~idmint_client.SequenceStoresDifferError` instead of mixing them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from idmint_client._exceptions import SequenceStoresDifferError
from idmint_client._replicas import Failed

MAX_VALUE = 2**63 - 1
"""The largest integer a sequence issues (signed 64-bit)."""
SCOPE_PREFIX = "sequence:"
"""Replica marks of sequence calls: a 503 for one sequence keeps its server out for that sequence only."""
_DIGITS = re.compile(r"0|[1-9][0-9]{0,18}")


@dataclass(frozen=True)
class SequenceRange:
    """A contiguous range reserved for the caller (``POST /v1/sequences/{name}/range``): ``first..last`` inclusive,
    ``count`` integers. Iterate it lazily with :meth:`as_range` (``range(first, last + 1)``)."""

    name: str
    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def as_range(self) -> range:
        return range(self.first, self.last + 1)


def sequence_path(name: str, verb: str) -> str:
    return f"/v1/sequences/{quote(name, safe='')}/{verb}"


def sequence_params(count: int) -> dict[str, str]:
    return {"count": str(count), "format": "string"}


def _integer(value: object, what: str) -> int:
    if not isinstance(value, str) or not _DIGITS.fullmatch(value) or int(value) > MAX_VALUE:
        raise Failed(f"{what} is not a sequence integer (decimal digits in 0..2**63-1): {str(value)[:40]!r}")
    return int(value)


def parse_next(response: httpx.Response, name: str, count: int) -> list[int]:
    """The ``ids`` of a ``next`` answer with ``format=string``, as ints: ``count`` of them, rising. Failed else."""
    try:
        body = response.json()
        ids = body["ids"]
        named = body["name"]
    except (ValueError, KeyError, TypeError) as exc:
        raise Failed(f"unreadable next answer: {exc!r}") from exc
    if named != name or not isinstance(ids, list) or len(ids) != count:
        size = len(ids) if isinstance(ids, list) else "?"
        raise Failed(f"next answer for {named!r} holds {size} integers; asked {count} of {name!r}")
    values = [_integer(v, f"integer {i}") for i, v in enumerate(ids, 1)]
    for i in range(1, len(values)):
        if values[i] <= values[i - 1]:
            raise Failed(f"next answer is not rising at integer {i + 1}: {values[i - 1]} then {values[i]}")
    return values


def parse_range(response: httpx.Response, name: str, count: int) -> SequenceRange:
    """A ``range`` answer with ``format=string``: ``first`` and ``last`` as ints, ``count`` of them. Failed else."""
    try:
        body = response.json()
        first, last, named, counted = body["first"], body["last"], body["name"], body["count"]
    except (ValueError, KeyError, TypeError) as exc:
        raise Failed(f"unreadable range answer: {exc!r}") from exc
    low, high = _integer(first, "first"), _integer(last, "last")
    if named != name or high - low + 1 != count or counted != count:
        raise Failed(f"range answer {named!r} {first}..{last} (count {counted!r}) is not {count} of {name!r}")
    return SequenceRange(name, low, high)


def check_one_fleet(urls: Sequence[str], documents: Mapping[str, Any]) -> None:
    """Raise SequenceStoresDifferError unless every server of ``urls`` read so far is of one fleet. With more than one
    server, a server whose fleet is unknown (no ``/v1/fleet``: an older idmint) cannot be told apart: refused too."""
    if len(urls) < 2:
        return
    seen: dict[str, str] = {}
    for url in urls:
        doc = documents.get(url)
        if doc is None:
            continue  # not read yet: it is read (and checked) before it is used
        fleet = doc.get("fleet_id") if isinstance(doc, dict) else None
        if not isinstance(fleet, str):
            raise SequenceStoresDifferError(url, None, None, None)
        seen.setdefault(fleet, url)
        if len(seen) > 1:
            (fleet_a, url_a), (fleet_b, url_b) = list(seen.items())[:2]
            raise SequenceStoresDifferError(url_a, fleet_a, url_b, fleet_b)


# -- business sequences: texts, parsing, gapless reservations ---------------------------------------------------------

_RESERVATION = re.compile(r"(?:[0-9]{4}-[0-9]{2}-[0-9]{2}\.)?[0-9a-f]{16}")


@dataclass(frozen=True)
class SequenceNumbers:
    """A ``next`` answer of a sequence with a template or periods: the integers (Python ints), their texts (one
    per integer; empty without a template) and the period's first day (``"2026-11-27"``; None for a sequence that
    never resets)."""

    name: str
    ids: list[int]
    texts: list[str]
    period: str | None


@dataclass(frozen=True)
class Reservation:
    """A gapless reservation (``POST /v1/sequences/{name}/reserve``): its integer and text, held for the caller
    until ``expires_at`` (RFC 3339); commit or void it by ``reservation``."""

    name: str
    value: int
    text: str | None
    period: str | None
    reservation: str
    expires_at: str


@dataclass(frozen=True)
class Settled:
    """A reservation committed or voided: ``state`` is ``committed``, ``voided`` or ``expired`` (a void of one that
    had expired)."""

    name: str
    value: int
    text: str | None
    period: str | None
    reservation: str
    state: str


@dataclass(frozen=True)
class ParsedNumber:
    """A number read back (``GET /v1/sequences/{name}/parse/{text}``): its period and integer, the check digit
    algorithm that checked it, the template that rendered it, and ``state`` (``unused``, ``reserved``,
    ``outstanding``, ``voided`` or ``committed``)."""

    name: str
    text: str
    period: str | None
    value: int
    check_digit: str | None
    template: str
    state: str


def parse_numbers(response: httpx.Response, name: str, count: int) -> SequenceNumbers:
    """A ``next`` answer with ``format=string``, texts and period included. Failed for one that is not."""
    ids = parse_next(response, name, count)
    body = response.json()
    texts = body.get("text", [])
    period = body.get("period")
    if not isinstance(texts, list) or (texts and len(texts) != count) or not all(isinstance(t, str) for t in texts):
        raise Failed(f"next answer's texts are not {count} strings")
    if period is not None and not isinstance(period, str):
        raise Failed(f"next answer's period is not a string: {period!r}")
    return SequenceNumbers(name, ids, texts, period)


def _object(response: httpx.Response, name: str, members: tuple[str, ...]) -> dict[str, Any]:
    try:
        body = response.json()
        if not isinstance(body, dict) or body.get("name") != name or not all(m in body for m in members):
            raise ValueError(f"not an answer for {name!r} with {', '.join(members)}")
        if type(body.get("value")) is not int or not 0 <= body["value"] <= MAX_VALUE:
            raise ValueError(f"value is not a sequence integer: {body.get('value')!r}")
    except ValueError as exc:
        raise Failed(f"unreadable answer: {exc}") from exc
    return body


def parse_reservation(response: httpx.Response, name: str) -> Reservation:
    body = _object(response, name, ("value", "text", "period", "reservation", "expires_at"))
    if not isinstance(body["reservation"], str) or not _RESERVATION.fullmatch(body["reservation"]):
        raise Failed(f"unreadable reservation ID: {str(body['reservation'])[:40]!r}")
    return Reservation(name, body["value"], body["text"], body["period"], body["reservation"], body["expires_at"])


def parse_settled(response: httpx.Response, name: str) -> Settled:
    body = _object(response, name, ("value", "text", "period", "reservation", "state"))
    return Settled(name, body["value"], body["text"], body["period"], body["reservation"], body["state"])


def parse_parsed(response: httpx.Response, name: str) -> ParsedNumber:
    body = _object(response, name, ("text", "period", "value", "check_digit", "template", "state"))
    return ParsedNumber(
        name, body["text"], body["period"], body["value"], body["check_digit"], body["template"], body["state"]
    )


def parse_path(name: str, text: str) -> str:
    """``/v1/sequences/{name}/parse/{text}``: the text quoted, its ``/`` kept (the route reads a path)."""
    return f"/v1/sequences/{quote(name, safe='')}/parse/{quote(text, safe='/')}"
