"""Request handling shared by the FastAPI routes and the lean ASGI fast path: option rules and response bodies."""

from __future__ import annotations

from typing import Any, AsyncIterator

from app.errors import InvalidIdError, InvalidOptionError
from app.node import Issued, Issuer, Node

MODES = ("spread", "time_sequential")
STREAM_CHUNK = 65_536
"""IDs per generated chunk of a stream (one shared timestamp prefix; ~1.7 MB of text for 26-char forms)."""


def check_count(count: int, maximum: int, what: str = "count") -> int:
    if not 1 <= count <= maximum:
        raise InvalidOptionError(f"{what} must be in 1..{maximum}, got {count}")
    return count


def issue_options(issuer: Issuer, mode: str | None, type_: str | None, after: str | None) -> dict[str, Any]:
    """Scheme options from query parameters; an option of another scheme is an error, never silently ignored."""
    name = issuer.name
    options: dict[str, Any] = {}
    if mode is not None:
        if name != "eight-byte":
            raise InvalidOptionError(f"mode applies only to eight-byte, not {name}")
        if mode not in MODES:
            raise InvalidOptionError(f"mode must be one of spread, time_sequential, got {mode!r}")
        options["mode"] = mode
    if type_ is not None:
        if name != "siq":
            raise InvalidOptionError(f"type applies only to siq, not {name}")
        options["qualifier"] = type_
    if after is not None:
        if name != "hlc-ulid":
            raise InvalidOptionError(f"after applies only to hlc-ulid, not {name}")
        try:
            options["after"] = issuer.scheme.parse(after.strip())
        except InvalidIdError as exc:
            raise InvalidOptionError(f"after must be an HLC-ULID: {exc}") from exc
    return options


def prepare(node: Node, scheme: str, count: int, fmt: str | None, mode: str | None, type_: str | None,
            after: str | None, maximum: int) -> tuple[Issuer, int, str, dict[str, Any]]:
    """Validate one issue request: (issuer, count, resolved format, generator options)."""
    issuer = node.issuer(scheme)
    check_count(count, maximum)
    resolved = issuer.scheme.resolve_format(fmt)
    return issuer, count, resolved, issue_options(issuer, mode, type_, after)


async def issue_lines(issuer: Issuer, count: int, fmt: str, options: dict[str, Any]) -> AsyncIterator[bytes]:
    """``count`` IDs as newline-terminated text in form ``fmt``, in chunks of at most STREAM_CHUNK IDs (one
    generated batch each), so memory does not grow with ``count``. Raises what :meth:`Issuer.issue` raises."""
    remaining = count
    while remaining:
        issued = await issuer.issue(min(remaining, STREAM_CHUNK), options)
        remaining -= issued.count
        yield issued.encode(fmt)


def issue_body(scheme: str, fmt: str, issued: Issued) -> bytes:
    """``{"scheme", "format", "ids": [...]}`` (+ scheme extras such as Muid's "bundle"), built without a JSON
    encoder: every text form is ASCII letters, digits, ``-`` and ``:``, so no escaping is ever needed."""
    lines = issued.encode(fmt)
    head = b'{"scheme":"' + scheme.encode() + b'","format":"' + fmt.encode() + b'","ids":["'
    body = head + lines[:-1].replace(b"\n", b'","') + b'"]'
    for key, value in issued.extra(fmt).items():
        body += b',"' + key.encode() + b'":"' + str(value).encode() + b'"'
    return body + b"}"
