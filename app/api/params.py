"""The one parser of the issue routes' parameters, shared by the raw-ASGI fast path and the FastAPI routes.

Each scheme gets one pydantic model (:func:`issue_model`), built by one function from the scheme's declared
:attr:`~app.schemes.base.Scheme.options`: ``count``, ``format`` and the scheme's options, ``extra="forbid"``.
The same model reads a GET query, a POST query and a POST JSON body, so the paths cannot disagree:

* ``count`` is a whole number written in ASCII digits (``"5"``; a JSON body may also give the number ``5``); a
  sign, a space or any other Unicode digit (``²``, ``٣``) is a 422, never a 500;
* an unknown parameter is a 422 naming it; an option of another scheme is a 422 saying which schemes it applies to;
* each option's text is checked by :meth:`~app.schemes.base.Scheme.parse_option`, whose value is passed to the
  generator as the option's ``kwarg``.

:func:`parse_issue` returns an :class:`IssueRequest` or raises :class:`~app.errors.InvalidOptionError`.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar
from urllib.parse import unquote_plus

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model
from starlette.exceptions import HTTPException
from starlette.requests import Request

from app.errors import InvalidOptionError
from app.schemes import schemes
from app.schemes.base import PUBLIC_FORMAT, Scheme

M = TypeVar("M", bound=BaseModel)

PUBLIC_SCHEMES_RULE = "it is for schemes whose bits say how to mask them (format=public in /v1/schemes)"

MAX_BODY_BYTES = 16_384
"""Largest JSON body accepted by POST /v1/ids/{scheme} (its parameters only; anything larger is a 413)."""

COUNT_DIGITS_MAX = 18
"""Longest count text read (far above any maximum; keeps int() of a huge digit string off the event loop)."""
COUNT_RULE = "count must be a whole number written in ASCII digits 0-9"


def _ascii_count(value: object) -> int:
    """``count`` as text of ASCII digits only (or a JSON integer); everything else names the rule."""
    if isinstance(value, str):
        if value and value.isascii() and value.isdigit():
            if len(value) > COUNT_DIGITS_MAX:
                raise ValueError(f"{COUNT_RULE}, at most {COUNT_DIGITS_MAX} digits, got {len(value)}")
            return int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{COUNT_RULE}, got {value!r}")


Count = Annotated[int, BeforeValidator(_ascii_count)]


def count_in_range(count: int, maximum: int) -> int:
    """``count`` if it is in 1..``maximum``; else InvalidOptionError naming the range."""
    if not 1 <= count <= maximum:
        raise InvalidOptionError(f"count must be in 1..{maximum}, got {count}")
    return count


def parse_count(value: object, maximum: int) -> int:
    """The one reader of ``count``: ASCII digits only (a JSON body may give an integer), at most
    :data:`COUNT_DIGITS_MAX` of them, in 1..``maximum``; absent (None) is 1. The issue routes read it through
    their models (:data:`Count`), the sequence routes and hot path here. Raises InvalidOptionError naming the rule."""
    if value is None:
        return 1
    try:
        count = _ascii_count(value)
    except ValueError as exc:
        raise InvalidOptionError(str(exc)) from None
    return count_in_range(count, maximum)


class IssueParams(BaseModel):
    """The parameters every scheme's issue routes take; :func:`issue_model` adds the scheme's options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: Count = Field(1, description="How many IDs (1..max_count; the stream allows up to max_stream_count).")
    format: str | None = Field(None, description="Text form; default the scheme's canonical form. See /v1/schemes.")


@functools.cache
def issue_model(scheme: Scheme) -> type[IssueParams]:
    """The parameter model of ``scheme``'s issue routes: count, format, and one optional text field per option."""
    fields: dict[str, Any] = {
        option.name: (str | None, Field(None, description=option.description)) for option in scheme.options
    }
    name = "".join(part.capitalize() for part in scheme.name.replace("_", "-").split("-")) + "IssueParams"
    return create_model(name, __base__=IssueParams, **fields)


@dataclass(frozen=True)
class IssueRequest:
    """One validated issue request: ``count`` (in range), the resolved ``format``, the generator's ``options``."""

    count: int
    format: str
    options: dict[str, Any]


def option_owners(name: str) -> list[str]:
    """The schemes that declare an issue option called ``name``."""
    return [s.name for s in schemes().values() if any(o.name == name for o in s.options)]


def _explain(scheme: Scheme, exc: ValidationError, counted_by: str = "count") -> str:
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "parameters"
        if err["type"] == "extra_forbidden":
            owners = option_owners(where)
            if owners:
                problems.append(f"{where} applies only to {', '.join(owners)}, not {scheme.name}")
            else:
                known = ", ".join(counted_by if f == "count" else f for f in issue_model(scheme).model_fields)
                problems.append(f"unknown parameter {where!r} for {scheme.name}; it takes {known}")
        elif where == "count":
            problems.append(str(err["msg"]).removeprefix("Value error, "))
        else:
            problems.append(f"{where}: {err['msg']}")
    return "; ".join(problems)


def parse_issue(scheme: Scheme, params: Mapping[str, Any], maximum: int, counted_by: str = "count") -> IssueRequest:
    """Validate one issue request's parameters (query and/or JSON members) for ``scheme``.

    ``maximum`` is the largest count allowed (max_count, or max_stream_count for the stream). ``counted_by``: the
    member that says how many IDs, as an unknown member's refusal lists what the route takes (backfill's
    ``times``). Raises InvalidOptionError naming every rule broken. The answer for no parameters at all (the hot
    path's plain ``GET /v1/ids/{scheme}``) is this same parse, memoized.
    """
    if not params:
        return _parse_no_params(scheme, maximum)
    return _parse(scheme, params, maximum, counted_by)


@functools.lru_cache(maxsize=256)
def _parse_no_params(scheme: Scheme, maximum: int) -> IssueRequest:
    return _parse(scheme, {}, maximum)


def _parse(scheme: Scheme, params: Mapping[str, Any], maximum: int, counted_by: str = "count") -> IssueRequest:
    try:
        parsed = issue_model(scheme).model_validate(params)
    except ValidationError as exc:
        raise InvalidOptionError(_explain(scheme, exc, counted_by)) from None
    count = count_in_range(parsed.count, maximum)
    if parsed.format == PUBLIC_FORMAT:  # keyed: the key file is checked before issuing (app.public)
        if scheme.public_split is None:
            raise InvalidOptionError(f"format=public is not available for {scheme.name}: {PUBLIC_SCHEMES_RULE}")
        fmt = PUBLIC_FORMAT
    else:
        fmt = scheme.resolve_format(parsed.format)
    options: dict[str, Any] = {}
    for option in scheme.options:
        text = getattr(parsed, option.name)
        if text is not None:
            options[option.kwarg] = scheme.parse_option(option.name, text)
    return IssueRequest(count, fmt, options)


QUERY_MEMO_SIZE = 1024
"""Distinct raw queries :func:`parse_issue_query` remembers (a bounded LRU: a client sending endless new queries
only evicts, never grows it)."""
MEMO_TEXT_BYTES = 1024
"""Longest raw query (or request target, :mod:`app.serving`) the hot path's memos remember; a longer one is parsed
afresh each time. Every real query is far shorter (a count, a format, a 63-character TypeID prefix); without it,
1,024 distinct queries padded to the header limit (``count=1&&&...&``, valid) held 64 MiB in each memo."""


def parse_issue_query(scheme: Scheme, query: bytes, maximum: int) -> IssueRequest:
    """:func:`parse_issue` of a raw query string (read by :func:`split_query`), remembered for the last
    :data:`QUERY_MEMO_SIZE` distinct ``(scheme, query, maximum)`` of at most :data:`MEMO_TEXT_BYTES`: a batch job
    repeating ``?count=1000`` or a client always asking ``?format=uuid`` is validated once, not by pydantic on every
    request. Parsing is pure (nothing but the text decides), the answer immutable, and a refused query is not
    remembered (it raises InvalidOptionError every time)."""
    if len(query) > MEMO_TEXT_BYTES:
        return _parse_issue_query(scheme, query, maximum)
    return _remembered_issue_query(scheme, query, maximum)


def _parse_issue_query(scheme: Scheme, query: bytes, maximum: int) -> IssueRequest:
    return parse_issue(scheme, query_params(split_query(query)) if query else {}, maximum)


_remembered_issue_query = functools.lru_cache(maxsize=QUERY_MEMO_SIZE)(_parse_issue_query)


def split_query(raw: bytes) -> list[tuple[str, str]]:
    """The pairs of a raw query string as Starlette reads them for the FastAPI routes (``parse_qsl`` with blank
    values kept: latin-1 bytes, ``+`` as space, %-escapes as UTF-8), in order: the hot routes' reader, so both
    paths read the same text."""
    pairs = []
    for part in raw.decode("latin-1").split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        if "%" in name or "+" in name:
            name = unquote_plus(name)
        pairs.append((name, unquote_plus(value) if "%" in value or "+" in value else value))
    return pairs


def query_params(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Query pairs as a dict; a parameter given twice is a 422 (never silently the first or the last)."""
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params:
            raise InvalidOptionError(f"{name} must be given once, got it more than once")
        params[name] = value
    return params


class _RepeatedMember(Exception):
    """A JSON object names a member twice (``json`` would keep the last silently)."""


def _members_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise _RepeatedMember(name)
        out[name] = value
    return out


def json_object(body: bytes, rule: str) -> dict[str, Any]:
    """``body`` as a JSON object in UTF-8. Raises InvalidOptionError: ``rule`` for anything else (not UTF-8, not
    JSON, not an object, nested deeper than the parser's recursion limit), or naming a member given twice (``json``
    would keep the last silently)."""
    try:
        members = json.loads(body.decode("utf-8"), object_pairs_hook=_members_once)
    except _RepeatedMember as exc:
        raise InvalidOptionError(f"{exc.args[0]} must be given once, got it more than once in the body") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # RecursionError: '[' * 5000
        raise InvalidOptionError(rule) from None
    except ValueError:  # int() of a number written with more digits than sys.get_int_max_str_digits()
        raise InvalidOptionError(
            f"a number in the request body has more than {sys.get_int_max_str_digits()} digits"
        ) from None
    if not isinstance(members, dict):
        raise InvalidOptionError(rule)
    return members


def merge_body(params: dict[str, Any], body: bytes) -> dict[str, Any]:
    """Add a POST body's JSON object members to the query ``params``. Raises InvalidOptionError for a body that
    is not a JSON object in UTF-8 or that repeats a member or a query parameter."""
    if not body.strip():
        return params
    members = json_object(body, "the request body must be a JSON object of issue parameters, in UTF-8")
    twice = sorted(set(members) & set(params))
    if twice:
        raise InvalidOptionError(f"{', '.join(twice)} given both in the query and in the body")
    return {**params, **members}


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body of a route whose body holds a few parameters: at most ``limit`` bytes (413 beyond, without
    reading the rest; the reason names this route's limit). Raises starlette's HTTPException(413)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"request body must be at most {limit} bytes on this route")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, f"request body must be at most {limit} bytes on this route")
    return body


# -- POST /v1/decode --------------------------------------------------------------------------------------------------

MAX_TEXT_CHARS = 1_000_000
"""Longest ``text`` POST /v1/decode reads (characters)."""


class TextRequest(BaseModel):
    """The body of ``POST /v1/decode`` (read by :func:`parse_text_body`, documented by this model's schema)."""

    model_config = ConfigDict(extra="forbid")  # an unknown member is a 422, never silently ignored

    text: str = Field(max_length=MAX_TEXT_CHARS, description="Any text: IDs, log lines, one or many lines.")


def parse_body(raw: bytes, model: type[M], shape: str) -> M:
    """A JSON request body read strictly into ``model`` (``extra="forbid"``): UTF-8, a JSON object (``shape``
    says which, for the message), each member once. Raises InvalidOptionError naming every rule broken (an
    unknown member, a missing one, a wrong type). Pure and picklable."""
    members = json_object(raw, f"the request body must be a JSON object {shape} in UTF-8")
    try:
        return model.model_validate(members)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err.get("loc", ())) or "body"
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown member {where!r}: the body takes {', '.join(model.model_fields)}")
            else:
                problems.append(f"{where}: {err['msg']}")
        raise InvalidOptionError("; ".join(problems)) from None


def parse_text_body(raw: bytes) -> str:
    """The ``text`` of a ``POST /v1/decode`` body: a JSON object in UTF-8 whose one member ``text`` is a string of
    at most MAX_TEXT_CHARS characters (:class:`TextRequest`). Raises InvalidOptionError naming the rule broken
    (:func:`parse_body`). Pure and picklable, so a long body is parsed in the decode worker process."""
    return parse_body(raw, TextRequest, '{"text": "..."}').text


# -- sequences: format ------------------------------------------------------------------------------------------------

SEQUENCE_FORMATS = ("number", "string", PUBLIC_FORMAT)
"""``format`` of a sequence's ``next`` and ``range``: JSON numbers (the default), or JSON strings of the decimal
digits (JavaScript's ``JSON.parse`` rounds numbers above 2**53; a string keeps every 64-bit integer exact), or
public IDs (``next`` only: :mod:`app.public`)."""


def parse_sequence_format(text: str | None) -> bool | str:
    """The ``format`` parameter of a sequence's ``next`` and ``range``: True for ``string``, False for ``number`` or
    none, :data:`PUBLIC_FORMAT` for ``public``. The one parser of this input (FastAPI routes and the fast path);
    exact and case-sensitive (``STRING`` is no form). Raises InvalidOptionError naming the rule."""
    if text is None or text == "number":
        return False
    if text == "string":
        return True
    if text == PUBLIC_FORMAT:
        return PUBLIC_FORMAT
    shown = text if len(text) <= 40 else text[:40] + "..."
    raise InvalidOptionError(
        f"format must be one of {', '.join(SEQUENCE_FORMATS)} (IDs as JSON numbers, as public IDs, or as JSON "
        f"strings for JavaScript), got {shown!r}"
    )
