"""Decoding IDs into the JSON decode object, for one scheme or by detecting the scheme.

The decode object (``GET /v1/decode/{scheme}/{id}``)::

    {"scheme": "<scheme name>", "id": "<canonical text>", "hex": "<packed bytes, lowercase hex>",
     "timestamp": "<RFC 3339, UTC, the scheme's precision>" | null, "fields": {...}}
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from typing import Any

from app.errors import InvalidIdError
from app.schemes import get_scheme, schemes
from app.schemes.base import Scheme

MAX_ID_TEXT_LEN = 128
"""Longest text accepted as one ID (the longest form, SIQ decimal or did, is well below)."""


def rfc3339(ns: int | None, digits: int) -> str | None:
    """``ns`` since the Unix epoch as RFC 3339 UTC with ``digits`` (3 or 6) fraction digits, truncated."""
    if ns is None:
        return None
    seconds, rem = divmod(ns, 1_000_000_000)
    try:
        base = datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return None
    frac = f"{rem:09d}"[:digits]
    return f"{base}.{frac}Z"


def _clean(text: str) -> str:
    text = text.strip()
    if not text:
        raise InvalidIdError("ID must not be empty")
    if len(text) > MAX_ID_TEXT_LEN:
        raise InvalidIdError(f"ID must be at most {MAX_ID_TEXT_LEN} characters long, got {len(text)}")
    return text


def decode_value(scheme: Scheme, value: int) -> dict[str, Any]:
    """The decode object of a packed integer of ``scheme``."""
    return {
        "scheme": scheme.name,
        "id": scheme.canonical(value),
        "hex": f"{value:0{scheme.packed_bytes * 2}x}",
        "timestamp": rfc3339(scheme.timestamp_ns(value), scheme.timestamp_digits),
        "fields": scheme.fields(value),
    }


def decode_one(scheme_name: str, text: str) -> dict[str, Any]:
    """Decode ``text`` as ``scheme_name``. Raises UnknownSchemeError, or InvalidIdError naming the rule broken."""
    scheme = get_scheme(scheme_name)
    return decode_value(scheme, scheme.parse(_clean(text)))


FUTURE_SLACK_NS = 24 * 3600 * 1_000_000_000
"""A reading dated more than a day ahead of now is implausible (the issuing clock cannot be that far off)."""


def decode_any(text: str, now_ns: int | None = None) -> dict[str, Any]:
    """Every scheme whose parser accepts ``text``: ``{"input", "candidates": [decode objects]}``.

    Candidates dated in the future (more than a day past ``now_ns``, default the current time) come last: a
    26-character Wiji ID also parses as an HLC-ULID dated around 2192, and the plausible reading should lead.
    Otherwise the registry order holds. Raises InvalidIdError when no scheme accepts it; the message gives each
    scheme's reason.
    """
    cleaned = _clean(text)
    horizon = (time.time_ns() if now_ns is None else now_ns) + FUTURE_SLACK_NS
    plausible, future, reasons = [], [], []
    for scheme in schemes().values():
        try:
            value = scheme.parse(cleaned)
        except InvalidIdError as exc:
            reasons.append(f"{scheme.name}: {exc}")
            continue
        ts = scheme.timestamp_ns(value)
        (future if ts is not None and ts > horizon else plausible).append(decode_value(scheme, value))
    if not plausible and not future:
        raise InvalidIdError("not an ID of any scheme (" + "; ".join(reasons) + ")")
    return {"input": text, "candidates": plausible + future}


# ID-shaped tokens in free text (log lines, tickets): did:siq: forms, hyphenated hex forms, and runs of
# base32/hex/decimal characters of a plausible length. Which of them really parse is decided by the parsers.
_TOKEN_RE = re.compile(
    r"did:siq:[A-Za-z0-9]+"
    r"|[0-9A-Za-z]+(?:-[0-9A-Za-z]+){1,4}"
    r"|[0-9A-Za-z]{13,40}"
)


# Shapes that are clearly meant as an ID of one of our schemes even when they do not parse (a typo, a truncated
# copy): kept as error rows, so a support engineer sees why the ID in a log line is invalid.
_ID_SHAPE_RE = re.compile(
    r"did:siq:\w+"                                             # SIQ did form
    r"|[0-9A-Fa-f]{12,14}(?:-[0-9A-Fa-f]{3,13}){1,2}"           # Muid T-M-O / T-M (and near misses)
    r"|[0-9A-Fa-f]{11,13}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{11,13}"  # HLC-ULID hex form
    r"|[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"  # UUID-shaped Wiji
    r"|(?=[0-9A-Za-z]*[0-9])(?=[0-9A-Za-z]*[A-Za-z])[0-9A-Za-z]{24,28}"  # base32 near 26 characters
)


def extract_tokens(text: str) -> list[tuple[int, str]]:
    """ID-shaped tokens of ``text`` as (1-based line number, token), in order of appearance.

    A token is kept if at least one scheme parses it, or if it has the unmistakable shape of an ID (a did:siq:
    form, hyphenated hex groups, ~26 mixed base32 characters) so that its error is shown; other words in a log
    line are dropped. A line that is a single token is always kept, so a pasted invalid ID shows its error.
    """
    found: list[tuple[int, str]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        hits = []
        for match in _TOKEN_RE.finditer(stripped):
            token = match.group(0)
            if any(_parses(s, token) for s in schemes().values()) or _ID_SHAPE_RE.fullmatch(token):
                hits.append(token)
        if not hits and " " not in stripped and len(stripped) <= MAX_ID_TEXT_LEN:
            hits.append(stripped)
        found.extend((lineno, t) for t in hits)
    return found


def _parses(scheme: Scheme, token: str) -> bool:
    try:
        scheme.parse(token)
    except InvalidIdError:
        return False
    return True


def decode_text(text: str, limit: int = 5000) -> dict[str, Any]:
    """Pick the ID-shaped tokens out of free text and decode each.

    Returns ``{"items": [{"line", "input", "candidates", "error"}], "truncated": bool}``; ``error`` is the
    rule broken (None when at least one scheme parsed it).
    """
    items = []
    tokens = extract_tokens(text)
    for lineno, token in tokens[:limit]:
        try:
            result = decode_any(token)
            items.append({"line": lineno, "input": token, "candidates": result["candidates"], "error": None})
        except InvalidIdError as exc:
            items.append({"line": lineno, "input": token, "candidates": [], "error": str(exc)})
    return {"items": items, "truncated": len(tokens) > limit}
