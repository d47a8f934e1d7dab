"""Sequences, shared by both clients (no I/O): paths, the answers of ``next`` and ``range`` read into Python ints,
and the rule that a client's servers keep one set of sequences.

Both calls ask for ``format=string`` (the integers as JSON strings, exact in any JSON reader) and hand back Python
ints. An answer that is not what the API promises (not strings of decimal digits, not rising, another count, past
2**63-1) fails its server, which is moved on from like a dead one. A call retried on another server after a lost
answer leaves a gap in the sequence, never a repeat: the server that did not answer reserved those integers for a
caller that never saw them.

A sequence lives in one fleet's storage (its etcd namespace or its state directory). Servers of two fleets each
issue their own ``orders`` from 1: a client given servers of two fleets (two regions) raises
:class:`~idmint_client.SequenceStoresDiffer` instead of mixing them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from idmint_client._exceptions import SequenceStoresDiffer
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
    """Raise SequenceStoresDiffer unless every server of ``urls`` read so far is of one fleet. With more than one
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
            raise SequenceStoresDiffer(url, None, None, None)
        seen.setdefault(fleet, url)
        if len(seen) > 1:
            (fleet_a, url_a), (fleet_b, url_b) = list(seen.items())[:2]
            raise SequenceStoresDiffer(url_a, fleet_a, url_b, fleet_b)
