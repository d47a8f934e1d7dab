"""Time bounds: the IDs of a scheme made in a time interval, as a half-open range in a column's order, and the SQL
predicate that selects them (``GET /v1/bounds/{scheme}``, ``idmint bounds``).

For an interval ``[from, to)`` and a scheme whose stored IDs sort by time
(:class:`~app.schemes.time_order.TimeOrder`), ``lower`` is the smallest packed value whose timestamp is at or after
``from`` and ``upper`` the smallest whose timestamp is at or after ``to``: every ID whose timestamp lies in the
interval satisfies ``lower <= id < upper`` in the column's order, and no other ID of the scheme does. ``upper`` is
None (no upper bound) when ``to`` lies past the last instant the scheme's IDs hold, or where the column's order ends
(a signed bigint's 2**63). This is the question sonyflake PR #79 and Discord's ``before``/``after`` paging answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from app.errors import InvalidOptionError
from app.schemes.base import Scheme, no_options
from app.schemes.time_order import BIGINT, BYTEA, SIGNED_64_LIMIT, UNSIGNED_64_LIMIT, UUID, Storage, TimeOrder

NS_IN_MS = 1_000_000
NS_IN_S = 1_000_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

TIME_RULE = "an RFC 3339 date-time with a time zone (2025-01-01T00:00:00Z) or an integer of Unix milliseconds"
_RFC3339 = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ](?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.(?P<fraction>[0-9]{1,9}))?"
    r"(?P<zone>[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])",
    re.ASCII,
)
_UNIX_MS = re.compile(r"-?[0-9]{1,16}", re.ASCII)
TIME_TEXT_MAX = 40
"""The longest time text accepted (an RFC 3339 time with nine fraction digits and an offset is 35)."""
TIME_MIN_NS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1) * 1_000
TIME_END_NS = (datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - _EPOCH) // timedelta(seconds=1) * NS_IN_S + NS_IN_S
"""Times are read and written within 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z (RFC 3339's years)."""

DIALECTS = ("postgresql", "sqlite", "mysql")
"""SQL dialects of the ``sql`` member: PostgreSQL (the default), SQLite (uuid and bytea columns as BLOBs) and
MySQL/MariaDB (uuid and bytea columns as BINARY(n)/VARBINARY, text compared byte by byte)."""
BINARY_DIALECTS = ("sqlite", "mysql")
"""Dialects whose uuid and bytea columns hold the bytes (BLOB, BINARY(16)): literals are ``X'hex'``."""
COLUMN_RULE = "a column name: up to three dot-separated SQL identifiers of ASCII letters, digits, _ and $"
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}(?:\.[A-Za-z_][A-Za-z0-9_$]{0,62}){0,2}", re.ASCII)
BOUNDS_PARAMS = ("from", "to", "storage", "column", "dialect")
"""The query parameters every scheme's bounds take; others are the scheme's own (snowflake ``layout``, eight-byte
``mode``, TypeID ``type``)."""


def parse_time(name: str, text: str) -> int:
    """``text`` (:data:`TIME_RULE`, ASCII digits only) as ns since the Unix epoch, in years 0001 to 9999 (UTC).
    Raises InvalidOptionError naming the parameter ``name`` and the rule."""
    ns = _read_time(name, text)
    if not TIME_MIN_NS <= ns < TIME_END_NS:
        raise InvalidOptionError(
            f"{name} must lie in 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z, got {text!r}"
        )
    return ns


def _read_time(name: str, text: str) -> int:
    if len(text) <= TIME_TEXT_MAX:
        if _UNIX_MS.fullmatch(text):
            return int(text) * NS_IN_MS
        match = _RFC3339.fullmatch(text)
        if match:
            zone = match["zone"].upper()
            try:
                moment = datetime.fromisoformat(f"{match['date']}T{match['time']}{'+00:00' if zone == 'Z' else zone}")
            except ValueError as exc:
                raise InvalidOptionError(f"{name} must be {TIME_RULE}, got {text!r}: {exc}") from None
            fraction = match["fraction"] or ""
            whole_s = (moment - _EPOCH) // timedelta(seconds=1)
            return whole_s * NS_IN_S + int(fraction.ljust(9, "0") or 0)
    raise InvalidOptionError(f"{name} must be {TIME_RULE}, got {text[: TIME_TEXT_MAX + 1]!r}")


def format_time(ns: int) -> str:
    """ns since the Unix epoch as RFC 3339 UTC, with as many fraction digits as it needs (3, 6 or 9; none for a
    whole second). A time past 9999-12-31 (a 48-bit-ms scheme's last instant is in 10889) is written as its
    year and Unix ms, since RFC 3339 has no such years."""
    whole_s, rest = divmod(ns, NS_IN_S)
    if not TIME_MIN_NS <= ns < TIME_END_NS:
        return f"Unix ms {ns // NS_IN_MS} (year {1970 + round(ns / NS_IN_S / 31_556_952)})"
    day = _EPOCH + timedelta(seconds=whole_s)
    moment = f"{day.year:04d}-{day.month:02d}-{day.day:02d}T{day.hour:02d}:{day.minute:02d}:{day.second:02d}"
    if rest == 0:
        return moment + "Z"
    digits = f"{rest:09d}"
    for width in (3, 6):
        if digits[width:] == "0" * (9 - width):
            return f"{moment}.{digits[:width]}Z"
    return f"{moment}.{digits}Z"


def parse_column(text: str) -> str:
    """A column name for the SQL (:data:`COLUMN_RULE`); InvalidOptionError otherwise (nothing is quoted)."""
    if not _COLUMN.fullmatch(text):
        raise InvalidOptionError(f"column must be {COLUMN_RULE}, got {text[:200]!r}")
    return text


def _first_field(order: TimeOrder, ns: int) -> int:
    """The smallest field value whose instant is at or after ``ns`` (may be negative or past ``field_max``)."""
    return math.ceil((ns - order.epoch_ns) / order.unit_ns)


def value_range(order: TimeOrder, from_ns: int, to_ns: int) -> tuple[int, int | None]:
    """``(lower, upper)`` as packed integers for ``[from_ns, to_ns)``; upper None when it would be ``2**width`` (the
    interval reaches past the last value the scheme's IDs can take).
    Raises InvalidOptionError when the interval is empty or lies wholly outside the scheme's times."""
    if from_ns >= to_ns:
        raise InvalidOptionError(f"from must be before to, got {format_time(from_ns)} and {format_time(to_ns)}")
    first = _first_field(order, from_ns)
    end = _first_field(order, to_ns)
    if end <= 0:
        raise InvalidOptionError(
            f"to ({format_time(to_ns)}) is at or before the first instant the IDs can hold "
            f"({format_time(order.instant_ns(0))}): no ID is that old"
        )
    if first > order.field_max:
        raise InvalidOptionError(
            f"from ({format_time(from_ns)}) is past the last instant the IDs can hold "
            f"({format_time(order.instant_ns(order.field_max))}): no ID is that new"
        )
    lower = max(first, 0) << order.shift
    upper = min(end, order.field_max + 1) << order.shift
    return lower, None if upper >> order.width else upper
    return lower, upper


def storage_range(storage: Storage, lower: int, upper: int | None) -> tuple[int, int | None]:
    """The packed range in the column's own order. A signed bigint wraps at 2**63: a range across it is a 422
    (split the query there); a range that ends there has no upper bound, and one that ends at 2**64 (-1 + 1 in the
    signed view) has the upper bound 0."""
    if not storage.signed:
        return lower, upper
    top = UNSIGNED_64_LIMIT if upper is None else upper
    if top <= SIGNED_64_LIMIT:  # all non-negative: the order's top is 2**63 - 1
        return lower, None if top == SIGNED_64_LIMIT else upper
    if lower >= SIGNED_64_LIMIT:  # all negative: 2**64 is rendered as 0, the first value past -1
        return lower, top
    raise InvalidOptionError(
        "the interval crosses the instant where the signed form wraps from 2**63-1 to -2**63 (the top bit of the "
        "timestamp); split the query there, or use storage=text or bytea"
    )


def _literal(storage: Storage, value: int, dialect: str) -> str:
    rendered = storage.render(value)
    if storage.kind == BIGINT:
        return rendered
    if storage.kind in (UUID, BYTEA) and dialect in BINARY_DIALECTS:
        return f"X'{value.to_bytes(storage.size, 'big').hex()}'"
    if storage.kind == UUID:
        return f"'{rendered}'::uuid"
    if storage.kind == BYTEA:
        return f"'{rendered}'::bytea"
    if dialect == "mysql":
        return f"CAST('{rendered}' AS BINARY)"
    return f"'{rendered}'" + (' COLLATE "C"' if dialect == "postgresql" else "")


def sql(storage: Storage, column: str, lower: int, upper: int | None, dialect: str) -> str:
    """The predicate ``column >= lower AND column < upper`` in ``dialect`` (text compared byte by byte: PostgreSQL's
    ``COLLATE "C"``; SQLite's default BINARY; MySQL's binary string literal)."""
    parts = [f"{column} >= {_literal(storage, lower, dialect)}"]
    if upper is not None:
        parts.append(f"{column} < {_literal(storage, upper, dialect)}")
    return " AND ".join(parts)


def _pick(name: str, text: str | None, choices: tuple[str, ...], default: str) -> str:
    if text is None:
        return default
    if text not in choices:
        raise InvalidOptionError(f"{name} must be one of {', '.join(choices)}, got {text[:100]!r}")
    return text


def time_bounds(scheme: Scheme, params: Mapping[str, str]) -> dict[str, Any]:
    """The answer of ``GET /v1/bounds/{scheme}`` for the query ``params`` (``from`` and ``to`` required; ``storage``
    default the scheme's first; ``column`` default ``id``; ``dialect`` default postgresql; the rest go to
    :meth:`Scheme.time_order`). Raises InvalidOptionError naming the rule broken."""
    missing = [name for name in ("from", "to") if name not in params]
    if missing:
        raise InvalidOptionError(f"{' and '.join(missing)} required ({TIME_RULE})")
    from_ns = parse_time("from", params["from"])
    to_ns = parse_time("to", params["to"])
    column = parse_column(params.get("column", "id"))
    dialect = _pick("dialect", params.get("dialect"), DIALECTS, DIALECTS[0])
    own = {k: v for k, v in params.items() if k not in BOUNDS_PARAMS}
    no_options(scheme.name, own, scheme.time_order_takes)
    order = scheme.time_order(own)
    storage = order.storage(params.get("storage", next(iter(order.storages))), scheme.name)
    lower, upper = storage_range(storage, *value_range(order, from_ns, to_ns))
    return {
        "scheme": scheme.name,
        "from": format_time(from_ns),
        "to": format_time(to_ns),
        "storage": storage.kind,
        "form": storage.form,
        "lower": storage.render(lower),
        "upper": None if upper is None else storage.render(upper),
        "sql": sql(storage, column, lower, upper, dialect),
        "dialect": dialect,
        "resolution_ns": int(order.unit_ns) if order.unit_ns.denominator == 1 else float(order.unit_ns),
        "read_as": order.label,
        "note": order.note,
        "storages": list(order.storages),
    }
