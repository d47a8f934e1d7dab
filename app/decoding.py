"""Decoding IDs into the JSON decode object, for one scheme or by detecting the scheme.

The decode object (``GET /v1/decode/{scheme}/{id}``)::

    {"scheme": "<scheme name>", "id": "<canonical text>", "hex": "<packed bytes, lowercase hex>",
     "timestamp": "<RFC 3339, UTC, the scheme's precision>" | null, "fields": {...}}
"""

from __future__ import annotations

import functools
import heapq
import json
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

from app.errors import InvalidIdError, InvalidOptionError, UnknownSchemeError
from app.schemes import get_scheme, schemes
from app.schemes.base import Scheme
from app.times import rfc3339

Registry = Mapping[str, Scheme]
"""Scheme name -> scheme as a node uses it (``Node.schemes``); None in the functions below = :func:`schemes`."""

MAX_ID_TEXT_LEN = 128
"""Longest text accepted as one ID (the longest form, SIQ decimal or did, is well below)."""


def _clean(text: str) -> str:
    text = text.strip()
    if not text:
        raise InvalidIdError("ID must not be empty")
    if len(text) > MAX_ID_TEXT_LEN:
        raise InvalidIdError(f"ID must be at most {MAX_ID_TEXT_LEN} characters long, got {len(text)}")
    return text


def decode_value(scheme: Scheme, value: int, described: bool = False) -> dict[str, Any]:
    """The decode object of a packed integer of ``scheme``; ``described`` adds the decode page's ``words`` (each
    field in words) and ``summary`` (one line) from :meth:`Scheme.words` / :meth:`Scheme.summary`."""
    fields = scheme.fields(value)
    out = {
        "scheme": scheme.name,
        "id": scheme.canonical(value),
        "hex": f"{value:0{scheme.packed_bytes * 2}x}",
        "timestamp": rfc3339(scheme.timestamp_ns(value), scheme.timestamp_digits),
        "fields": fields,
    }
    if described:
        out["words"] = scheme.words(fields)
        out["summary"] = scheme.summary(fields)
    return out


def decode_one(
    scheme_name: str, text: str, registry: Registry | None = None, options: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Decode ``text`` as ``scheme_name``, read with the scheme's decode ``options`` (its
    :attr:`~app.schemes.base.Scheme.decode_options`). Raises UnknownSchemeError, InvalidOptionError for an
    undeclared or bad option, or InvalidIdError naming the rule broken."""
    if registry is None:
        scheme = get_scheme(scheme_name)
    elif scheme_name in registry:
        scheme = registry[scheme_name]
    else:
        raise UnknownSchemeError(f"unknown scheme {scheme_name!r}; known schemes: {', '.join(registry)}")
    if options:
        scheme = scheme.with_decode_options(**options)
    return decode_value(scheme, scheme.parse(_clean(text)))


def read_with(registry: Registry, options: Mapping[str, str]) -> Registry:
    """``registry`` with each scheme reading IDs by the decode ``options`` it declares (``layout=discord`` changes
    snowflake's reading and no other). Raises InvalidOptionError for an option no scheme declares, or a bad value."""
    if not options:
        return registry
    declared = {o.name for s in registry.values() for o in s.decode_options}
    unknown = sorted(set(options) - declared)
    if unknown:
        raise InvalidOptionError(
            f"unknown decode option {', '.join(unknown)}"
            + (f"; the decode options are {', '.join(sorted(declared))}" if declared else "; there are none")
        )
    out: dict[str, Scheme] = {}
    for name, scheme in registry.items():
        own = {key: value for key, value in options.items() if key in {o.name for o in scheme.decode_options}}
        out[name] = scheme.with_decode_options(**own) if own else scheme
    return out


FUTURE_SLACK_NS = 24 * 3600 * 1_000_000_000
"""A reading dated more than a day ahead of now is implausible (the issuing clock cannot be that far off)."""


def decode_any(
    text: str, now_ns: int | None = None, registry: Registry | None = None, described: bool = False
) -> dict[str, Any]:
    """Every scheme whose parser accepts ``text``: ``{"input", "candidates": [decode objects]}``.

    Candidates dated in the future (more than a day past ``now_ns``, default the current time) come last: a
    26-character Wiji ID also parses as an HLC-ULID dated around 2192, and the plausible reading should lead.
    Otherwise the registry order holds. Raises InvalidIdError when no scheme accepts it; the message gives each
    scheme's reason. ``described`` adds each candidate's words and summary (see :func:`decode_value`).
    """
    cleaned = _clean(text)
    horizon = (time.time_ns() if now_ns is None else now_ns) + FUTURE_SLACK_NS
    plausible: list[dict[str, Any]] = []
    future: list[dict[str, Any]] = []
    reasons: list[str] = []
    for scheme in (schemes() if registry is None else registry).values():
        try:
            value = scheme.parse(cleaned)
        except InvalidIdError as exc:
            reasons.append(f"{scheme.name}: {exc}")
            continue
        ts = scheme.timestamp_ns(value)
        (future if ts is not None and ts > horizon else plausible).append(decode_value(scheme, value, described))
    if not plausible and not future:
        raise InvalidIdError("not an ID of any scheme (" + "; ".join(reasons) + ")")
    return {"input": text, "candidates": plausible + future}


# ID-shaped tokens in free text (log lines, tickets): every scheme's own shape (its token_pattern), DID-style
# "method:kind:id" forms, hyphenated groups, and runs of base32/hex/decimal characters of a plausible length. Which
# of them really parse is decided by the parsers.
_GENERIC_TOKEN_PATTERNS = (
    r"[a-z]+:[a-z0-9]+:[A-Za-z0-9]+",
    r"[0-9A-Za-z]+(?:-[0-9A-Za-z]+){1,4}",
    r"[0-9A-Za-z_]{13,}",
)
_BOUNDED = r"(?<!\w)(?!(?<=[-+])\d+(?!\w))(?:{})(?!\w)"
"""Every finder matches whole words only (``\\w``: letters, digits and ``_`` of any script), and never a signed
number: a 64-digit hash never yields a 40-character KSUID, ``user_<27 characters>`` a TypeID with the last character
dropped, nor ``-175928847299117063`` a positive snowflake."""


CANDIDATES_PER_ITEM = 4
"""Free text: distinct candidate words tried per item allowed (5,000 items: 20,000 words, about a second of
parsing at worst; every new word costs each scheme's parse, a repeated one nothing), so a text of ID-like words
that are no IDs cannot hold the decode worker for long (a megabyte of ``a-b-c-d-e-f`` took 4 s unbounded), while a
log's repeated non-ID words (``worker-3``, ``content-type``, the day's date) are tried once."""


@functools.lru_cache(maxsize=8)
def _token_res(registry: tuple[Scheme, ...]) -> tuple[tuple[re.Pattern[str], ...], re.Pattern[str] | None]:
    """(patterns that find tokens, the union of the schemes' shapes) for these schemes."""
    shapes = list(dict.fromkeys(s.token_pattern for s in registry if s.token_pattern))
    finders = tuple(re.compile(_BOUNDED.format(p)) for p in (*shapes, *_GENERIC_TOKEN_PATTERNS))
    shape = re.compile("|".join(f"(?:{p})" for p in shapes)) if shapes else None
    return finders, shape


SEGMENT_CHARS = 4096
"""A long line is scanned in segments of about this many characters, cut at whitespace (no token holds any), so
a scan that stops early (CANDIDATES_PER_ITEM) has not run every finder over the whole line first: a finder that
matches nothing would otherwise read all of a one-megabyte line at its first step."""
_SPACE = re.compile(r"\s")


def _line_spans(line: str, finders: tuple[re.Pattern[str], ...]) -> Iterator[tuple[int, int]]:
    """Every candidate token's (start, stop) in ``line``, leftmost first, the longest first at one start, each
    once. Lazy: segment by segment (SEGMENT_CHARS), the finders' matches merged as they are found."""
    offset = 0
    while offset < len(line):
        cut = _SPACE.search(line, offset + SEGMENT_CHARS) if len(line) - offset > SEGMENT_CHARS else None
        stop = cut.start() if cut else len(line)
        segment = line[offset:stop]
        streams = [((m.start(), -m.end()) for m in finder.finditer(segment)) for finder in finders]
        last = (-1, 0)
        for span in heapq.merge(*streams):
            if span != last:
                last = span
                yield offset + span[0], offset - span[1]
        offset = stop


def extract_tokens(
    text: str, registry: Registry | None = None, limit: int | None = None, max_candidates: int | None = None
) -> tuple[list[tuple[int, str]], bool]:
    """(ID-shaped tokens of ``text`` as (1-based line number, token) in order of appearance, whether the scan
    stopped early). The scan stops after ``limit`` tokens, or after trying ``max_candidates`` distinct candidate
    words against the parsers (each costs every scheme's parse: a megabyte of ``a-b-c-d-e-f`` words took 4 s
    unbounded; a word seen before costs a dict lookup).

    A token is kept if at least one scheme parses it, or if it has the unmistakable shape of an ID of some scheme
    (its :attr:`~app.schemes.base.Scheme.token_pattern`: a did:siq: form, hyphenated hex groups, ~26 mixed base32
    characters...) so that its error is shown; other words in a log line are dropped. A line that is a single
    token is always kept, so a pasted invalid ID shows its error.
    """
    registered = tuple((schemes() if registry is None else registry).values())
    finders, shape = _token_res(registered)
    found: list[tuple[int, str]] = []
    verdicts: dict[str, bool] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        hits: list[str] = []
        end = 0
        for start, stop in _line_spans(stripped, finders):  # a candidate that is kept hides those it overlaps
            if start < end:
                continue
            token = stripped[start:stop]
            kept = verdicts.get(token)
            if kept is None:  # each distinct word is tried (and counted against max_candidates) once
                if max_candidates is not None and len(verdicts) >= max_candidates:
                    found.extend((lineno, t) for t in hits)
                    return (found if limit is None else found[:limit]), True
                kept = any(_parses(s, token) for s in registered) or bool(shape and shape.fullmatch(token))
                verdicts[token] = kept
            if kept:
                hits.append(token)
                end = stop
        if not hits and " " not in stripped and len(stripped) <= MAX_ID_TEXT_LEN:
            hits.append(stripped)
        found.extend((lineno, t) for t in hits)
        if limit is not None and len(found) >= limit:
            return found[:limit], True
    return found, False


def _parses(scheme: Scheme, token: str) -> bool:
    try:
        scheme.parse(token)
    except InvalidIdError:
        return False
    return True


def decode_text_items(text: str, limit: int, settings: Any = None) -> tuple[list[bytes], bool]:
    """:func:`decode_text` as (each item's JSON text, ``truncated``), with every scheme configured by ``settings``
    as the node's are (run in a worker process: plain, picklable arguments and result). Items, not one document: the
    event loop reads them back a few at a time (a 5,000-item answer's ``json.loads`` is one call of tens of ms)."""
    answer = decode_text(text, limit, _configured(settings))
    return [json.dumps(item, separators=(",", ":")).encode() for item in answer["items"]], answer["truncated"]


_configured_cache: dict[str, Registry] = {}


def _configured(settings: Any) -> Registry | None:
    """The registry as a node with ``settings`` configures it (:meth:`Scheme.configured`), built once per settings."""
    if settings is None:
        return None
    key = settings.model_dump_json()
    if key not in _configured_cache:
        _configured_cache[key] = {name: s.configured(settings) for name, s in schemes().items()}
    return _configured_cache[key]


def decode_text(text: str, limit: int = 5000, registry: Registry | None = None) -> dict[str, Any]:
    """Pick the ID-shaped tokens out of free text and decode each (candidates with their words and summary).

    Returns ``{"items": [{"line", "input", "candidates", "error"}], "truncated": bool}``; ``error`` is the
    rule broken (None when at least one scheme parsed it). ``truncated``: the text holds more than ``limit`` tokens,
    or the scan stopped after ``CANDIDATES_PER_ITEM * limit`` candidate words, with text left unread.
    """
    items = []
    # One more than shown: tells whether the text holds more. Candidates are bounded too (CANDIDATES_PER_ITEM).
    tokens, cut = extract_tokens(text, registry, limit + 1, CANDIDATES_PER_ITEM * limit)
    for lineno, token in tokens[:limit]:
        try:
            result = decode_any(token, registry=registry, described=True)
            items.append({"line": lineno, "input": token, "candidates": result["candidates"], "error": None})
        except InvalidIdError as exc:
            items.append({"line": lineno, "input": token, "candidates": [], "error": str(exc)})
    return {"items": items, "truncated": cut}
