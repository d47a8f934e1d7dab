"""Typed results: decoded IDs, the scheme catalogue, buffer statistics (frozen dataclasses built from the JSON API)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


def _timestamp(text: str | None) -> datetime | None:
    """RFC 3339 UTC (``2026-11-21T12:00:01.123456Z``) as an aware datetime; None stays None."""
    if text is None:
        return None
    return datetime.fromisoformat(text)  # Python 3.11+ reads the "Z" suffix


@dataclass(frozen=True)
class Decoded:
    """One ID read as one scheme (``GET /v1/decode/{scheme}/{id}``).

    ``id`` is the canonical text form, ``hex`` the packed bytes in lowercase hex, ``timestamp`` the creation time
    (aware UTC datetime at the scheme's precision: ms or µs; None when the scheme has no time), ``fields`` the
    scheme's own fields by name (``timestamp_ms``, ``generator_id``, ``sequence``... see ``/v1/schemes``).
    """

    scheme: str
    id: str
    hex: str
    timestamp: datetime | None
    fields: Mapping[str, Any]
    timestamp_text: str | None = field(default=None, repr=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decoded:
        return cls(
            scheme=data["scheme"],
            id=data["id"],
            hex=data["hex"],
            timestamp=_timestamp(data.get("timestamp")),
            fields=dict(data.get("fields") or {}),
            timestamp_text=data.get("timestamp"),
        )


@dataclass(frozen=True)
class Candidates:
    """Every scheme whose parser accepts ``input`` (``GET /v1/decode/{id}``), the plausible readings first.

    Iterating yields the :class:`Decoded` candidates; ``best`` is the first one.
    """

    input: str
    candidates: tuple[Decoded, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Candidates:
        return cls(input=data["input"], candidates=tuple(Decoded.from_json(c) for c in data["candidates"]))

    @property
    def best(self) -> Decoded:
        return self.candidates[0]

    @property
    def schemes(self) -> tuple[str, ...]:
        return tuple(c.scheme for c in self.candidates)

    def __iter__(self) -> Iterator[Decoded]:
        return iter(self.candidates)

    def __len__(self) -> int:
        return len(self.candidates)


@dataclass(frozen=True)
class SchemeInfo:
    """One scheme of ``GET /v1/schemes``.

    ``formats`` are its text forms (the first is canonical); ``max_count`` / ``max_stream_count`` the largest
    ``count`` of one batch / one stream request; ``node`` what the answering replica holds (identities...);
    ``token_patterns`` the regex of each form's IDs; ``rising`` the forms whose IDs rise within one answer;
    ``raw`` the whole JSON entry (layout, options, reference and whatever newer servers add).
    """

    name: str
    formats: tuple[str, ...]
    canonical_format: str | None
    max_count: int | None
    max_stream_count: int | None
    node: Mapping[str, Any]
    raw: Mapping[str, Any] = field(repr=False)
    token_patterns: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Per text form, the regex every ID of that form matches whole (the client checks answers against it)."""
    max_lengths: Mapping[str, int] = field(default_factory=dict, repr=False)
    """Per text form, the most characters one of its IDs has (answers longer than a count can need are refused)."""
    rising: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict, repr=False)
    """The text forms whose IDs strictly rise as strings within one answer, each with the options a request must
    name for it (option -> values; empty: always); a server that does not say gives none."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SchemeInfo:
        limits = data.get("limits") or {}
        formats = tuple(data.get("formats") or ())
        return cls(
            name=data["name"],
            formats=formats,
            canonical_format=data.get("canonical_format", formats[0] if formats else None),
            max_count=limits.get("max_count"),
            max_stream_count=limits.get("max_stream_count"),
            node=dict(data.get("node") or {}),
            raw=dict(data),
            token_patterns={str(k): str(v) for k, v in (data.get("token_patterns") or {}).items()},
            rising=_rising(data.get("rising")),
            max_lengths={str(k): v for k, v in (data.get("max_lengths") or {}).items() if isinstance(v, int) and v > 0},
        )


@dataclass(frozen=True)
class BufferStats:
    """The state of one ``new_id`` buffer (one scheme, options and format), for monitoring and tests.

    ``buffered``: IDs held now (fresh or not yet checked); ``refill_size``: the size of the next refill request;
    ``refills``: batch requests made; ``issued``: IDs received from the server; ``expired``: IDs discarded
    unused because they were older than ``max_age``; ``misses``: draws that found the buffer empty and waited
    for the server (the first draw always does; more mean refills came too late).
    """

    scheme: str
    options: Mapping[str, str]
    format: str | None
    buffered: int
    refill_size: int
    refills: int
    issued: int
    expired: int
    misses: int


def _rising(data: object) -> dict[str, dict[str, tuple[str, ...]]]:
    """``/v1/schemes``' ``rising`` member, anything unreadable left out (then not checked)."""
    if not isinstance(data, dict):
        return {}
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for form, needs in data.items():
        if isinstance(needs, dict) and all(isinstance(v, list) for v in needs.values()):
            out[str(form)] = {str(k): tuple(str(x) for x in v) for k, v in needs.items()}
    return out
