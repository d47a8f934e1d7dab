"""How a scheme's stored IDs sort by time: what :meth:`app.schemes.base.Scheme.time_order` declares, and what
:mod:`app.bounds` turns into the range of IDs of a time interval (``GET /v1/bounds/{scheme}``).

A scheme whose IDs sort by time puts its timestamp field on top of the packed integer: an ID whose field holds ``f``
was made at ``epoch_ns + f * unit_ns``, and every ID with field ``f`` lies in ``[f << shift, (f + 1) << shift)``.
Each column type ("storage") the scheme's IDs keep that order in is a :class:`Storage`: how a packed integer is
written as that column's value, and how that column compares (numbers, bytes, or text byte by byte).

The scheme module declares its own :class:`TimeOrder` (layout knowledge stays in the module); a scheme whose stored
order is not time order (eight-byte's spread mode, Wiji, Muid) raises :class:`~app.errors.InvalidOptionError`
saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

BIGINT = "bigint"
UUID = "uuid"
BYTEA = "bytea"
TEXT = "text"
STORAGES = (BIGINT, UUID, BYTEA, TEXT)
"""Every storage (column type) name, in the order the API lists them."""

SIGNED_64_LIMIT = 1 << 63
UNSIGNED_64_LIMIT = 1 << 64


@dataclass(frozen=True)
class Storage:
    """One column type a scheme's IDs sort by time in.

    ``kind`` is one of :data:`STORAGES`; ``render(value)`` gives a packed integer as that column's value in its
    literal form (bigint: decimal; uuid: 8-4-4-4-12 lowercase hex; bytea: ``\\x`` + lowercase hex; text: the text
    form ``form``). ``signed``: a bigint holding the two's-complement view of an unsigned 64-bit value (eight-byte's
    ``format=signed``), whose order wraps at 2**63. ``form`` names the text form or byte size, for the answer.
    """

    kind: str
    render: Callable[[int], str]
    form: str = ""
    signed: bool = False
    size: int = 0
    """Bytes of a uuid or bytea value (0 for bigint and text)."""


def bigint(signed: bool = False) -> Storage:
    """A signed 64-bit integer column (PostgreSQL/SQLite ``bigint``). ``signed``: the value is an unsigned 64-bit
    ID written as Java's ``long`` (two's complement)."""
    if signed:
        return Storage(BIGINT, _signed_decimal, "signed", signed=True)
    return Storage(BIGINT, str, "decimal")


def _signed_decimal(value: int) -> str:
    return str(value - UNSIGNED_64_LIMIT if value >= SIGNED_64_LIMIT else value)


def uuid_storage() -> Storage:
    """A 16-byte ``uuid`` column (PostgreSQL compares uuids byte by byte: packed order)."""

    def render(value: int) -> str:
        text = f"{value:032x}"
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"

    return Storage(UUID, render, "uuid", size=16)


def bytea(size: int) -> Storage:
    """A byte-string column (``bytea``, SQLite BLOB) holding the packed ID as ``size`` big-endian bytes."""
    return Storage(BYTEA, lambda value: "\\x" + value.to_bytes(size, "big").hex(), f"{size} bytes", size=size)


def text(form: str, render: Callable[[int], str]) -> Storage:
    """A text column holding text form ``form`` (fixed width, so text order is packed order)."""
    return Storage(TEXT, render, form)


def sixteen_bytes(
    shift: int,
    unit_ns: int,
    field_max: int,
    form: str,
    render: Callable[[int], str],
    *,
    label: str = "",
    note: str = "",
) -> TimeOrder:
    """The :class:`TimeOrder` of a 128-bit scheme whose timestamp (epoch 1970, ``unit_ns`` per unit) is its top field
    from bit ``shift``: it sorts in uuid, bytea (16 bytes) and text (form ``form``, written by ``render``) columns."""
    storages = {UUID: uuid_storage(), BYTEA: bytea(16), TEXT: text(form, render)}
    return TimeOrder(shift, 128, 0, Fraction(unit_ns), field_max, storages, label, note)


@dataclass(frozen=True)
class TimeOrder:
    """A scheme's IDs sort by time: the timestamp field is the packed integer's top field.

    ``shift``: bit position of the field's lowest bit; ``width``: the packed integer's bits (its values are
    ``0 .. 2**width - 1``); ``epoch_ns``: ns since the Unix epoch of field value 0; ``unit_ns``: ns per field unit
    (exact: SIQ's is 1e9/65536); ``field_max``: the largest field value the scheme issues; ``storages``: the column
    types, by kind; ``label``: what was read (a snowflake layout's name, a mode); ``note``: what a user should know
    about the answer (a coarse timestamp, a column that holds other IDs too), or "".
    """

    shift: int
    width: int
    epoch_ns: int
    unit_ns: Fraction
    field_max: int
    storages: dict[str, Storage]
    label: str = ""
    note: str = ""

    def storage(self, kind: str, scheme: str) -> Storage:
        """The storage ``kind``; InvalidOptionError naming the ones this scheme sorts in."""
        found = self.storages.get(kind)
        if found is None:
            from app.errors import InvalidOptionError

            raise InvalidOptionError(
                f"storage must be one of {', '.join(self.storages)} for {scheme} (the column types its IDs sort by "
                f"time in), got {kind[:100]!r}"
            )
        return found

    def instant_ns(self, field: int) -> int:
        """ns since the Unix epoch of field value ``field`` (floor): what the scheme's ``timestamp_ns`` gives."""
        return self.epoch_ns + int(field * self.unit_ns)
