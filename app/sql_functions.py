"""SQL functions that read idmint's IDs inside PostgreSQL and MySQL/MariaDB (``idmint sql functions``).

The DDL is generated from the scheme modules' own layouts: each scheme's :class:`~app.schemes.packed.PackedInt`
(field positions, widths, fixed values, caps), its text alphabets and its time field's epoch and unit. Nothing about
a layout is written here twice; this module only says, per scheme, which text forms are read (mirroring the
scheme's ``parse``) and how each decode field is written (mirroring the scheme's ``fields``).

The functions created, for a scheme ``s`` (``-`` in its name becomes ``_``)::

    idmint_<s>_value(id text)   -> numeric / DECIMAL(65,0): the packed integer; NULL for an ID that does not read
    idmint_<s>_time(id text)    -> timestamptz / DATETIME(3): the ID's time, UTC, ms precision (truncated)
    idmint_<s>_fields(id text)  -> jsonb / JSON: the ``fields`` of ``GET /v1/decode/{scheme}/{id}``
    idmint_time(scheme text, id text), idmint_fields(scheme text, id text): the same, by scheme name

plus typed forms where a column type holds the ID: ``idmint_time(uuid)`` / ``idmint_fields(uuid)`` (UUIDv7, on
PostgreSQL), and ``idmint_<s>_time(bigint)`` / ``idmint_<s>_fields(bigint)`` (MySQL: ``idmint_<s>_time_bigint``)
for snowflake and eight-byte (its signed form: two's complement undone). The node's snowflake layout is
``snowflake``; every named layout is read too, as ``snowflake:<layout>`` (functions ``idmint_snowflake_<layout>_*``).
Every function is a pure function of its arguments: IMMUTABLE STRICT PARALLEL SAFE PL/pgSQL (PostgreSQL) or
DETERMINISTIC NO SQL (MySQL), and never raises for a malformed ID: it returns NULL.

Reading a text: the first of the scheme's text forms whose pattern (a regular expression, so no digit outside the
alphabet reaches the arithmetic) matches gives the digits, read as exact integer arithmetic (chunks of digits in
bigint, joined in numeric/DECIMAL); the packed value must then be within the layout (its maximum, fixed fields,
capped fields). Fields are bit slices of the exact value (``mod(div(v, 2**shift), 2**bits)``), never floats.

Times past 9999-12-31 are NULL, as ``/v1/decode`` gives ``timestamp: null`` for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction

from app.bounds import TIME_END_NS
from app.schemes import _crockford, eight_byte, hlc_ulid, ksuid, siq, snowflake
from app.schemes import muid as muid_module
from app.schemes import typeid as typeid_module
from app.schemes import ulid as ulid_module
from app.schemes import uuidv7 as uuidv7_module
from app.schemes import wiji as wiji_module
from app.schemes._patterns import DECIMAL_DIGITS, HEX_DIGITS
from app.schemes._uuid_text import HEX_LEN as UUID_HEX_LEN
from app.schemes._uuid_text import UUID_LEN, UUID_SEPARATOR_POSITIONS
from app.schemes.eight_byte import codec as eight_byte_codec
from app.schemes.hlc_ulid import codec as hlc_codec
from app.schemes.ksuid import codec as ksuid_codec
from app.schemes.packed import HEX_DIGIT_BITS, PackedInt
from app.schemes.siq import codec as siq_codec
from app.schemes.snowflake import codec as snowflake_codec

POSTGRESQL = "postgresql"
MYSQL = "mysql"
DIALECTS = (POSTGRESQL, MYSQL)
"""The dialects ``idmint sql functions`` writes: PostgreSQL (12+) and MySQL 8 / MariaDB 10.6+."""

NS_IN_MS = 1_000_000
TIME_END_MS = TIME_END_NS // NS_IN_MS
"""Times at or past 10000-01-01 are NULL (``/v1/decode`` gives no RFC 3339 text for them)."""
CRC32_POLYNOMIAL = 0xEDB88320
"""CRC-32 (ISO-HDLC, zlib's crc32), reflected: the checksum SIQ's did form carries."""
CRC32_MASK = 0xFFFFFFFF


def _crc32_table() -> list[int]:
    """The 256-entry table of the reflected CRC-32 (one byte per step)."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ CRC32_POLYNOMIAL if crc & 1 else crc >> 1
        table.append(crc)
    return table


HEX_CHUNK_DIGITS = 8
"""Hex fields are written 8 digits (32 bits) at a time: every chunk fits a signed bigint."""


# --- what is read, and how it is written ------------------------------------------------------------------------


@dataclass(frozen=True)
class Reader:
    """One text form: a text matching ``pattern`` (POSIX regex, full match, on the text after ``fold``) is read as
    the digits of ``alphabet`` (its value order) after dropping ``skip`` leading characters and every ``-``, with
    ``substitutions`` applied (Crockford's O->0 ...). ``fold``: "upper", "lower" or "" (case-sensitive)."""

    pattern: str
    alphabet: str
    fold: str = ""
    skip: int = 0
    substitutions: tuple[tuple[str, str], ...] = ()
    separators: bool = False
    take: int = 0
    """Characters read after ``skip`` (0: the rest); negative: the last ``-take`` characters."""
    wrap: int = 0
    """Nonzero: the text is a negative two's-complement number (``-`` and digits ``d``, ``skip=1``), read as
    ``wrap - d``, for ``d`` up to ``wrap / 2``."""
    scale: int = 1
    """The digits' value times ``scale`` (a shorthand that leaves low fields out: Muid's ``T-M``)."""
    width: int = 0
    """The most digits read (shorter texts are read as if zero-padded to it)."""
    strip_zeros: bool = False
    """Leading zeros are dropped first (``0x`` and any number of hex digits)."""
    checksum_bytes: int = 0
    """Nonzero: the digits are a CRC-32 above this many bytes of ID, read only when the CRC-32 matches (SIQ's
    did form)."""


@dataclass(frozen=True)
class Bits:
    """An integer field: ``bits`` wide at ``shift``, written as ``value * scale + offset`` (a JSON number);
    ``reverse``: its bits in reverse order (eight-byte's spread timestamp)."""

    shift: int
    bits: int
    scale: int = 1
    offset: int = 0
    reverse: bool = False
    signed: bool = False
    """Two's complement: a value with the top bit set is negative (Muid's offset)."""
    all_ones: str = ""
    """SQL written for the all-ones value ("-1", "NULL"; "" for none): a sentinel."""


@dataclass(frozen=True)
class Sum:
    """An integer field made of several bit ranges: the sum of ``parts`` (each scaled to its place)."""

    parts: tuple[Bits, ...]


@dataclass(frozen=True)
class Switch:
    """A field whose writing depends on a selector field's value (a mode bit, a version nibble): NULL for a
    value not among ``cases``."""

    selector: Bits
    cases: tuple[tuple[int, FieldSpec], ...]


@dataclass(frozen=True)
class UuidText:
    """The whole 128-bit value as 8-4-4-4-12 lowercase hex."""


@dataclass(frozen=True)
class TextBefore:
    """The text before the last ``separator`` of the ID ("" when there is none): a TypeID's prefix."""

    separator: str


@dataclass(frozen=True)
class Hex:
    """A field written as lowercase hex, ``digits`` wide (a JSON string)."""

    shift: int
    bits: int

    @property
    def digits(self) -> int:
        return -(-self.bits // HEX_DIGIT_BITS)


@dataclass(frozen=True)
class Const:
    """A field whose value is fixed for the reading (a layout's name)."""

    value: str | int


FieldSpec = Bits | Hex | Const | Sum | Switch | UuidText | TextBefore


@dataclass(frozen=True)
class Reading:
    """How one scheme's IDs are read in SQL (see the module docstring).

    ``packed``: the layout (its maximum, fixed values and caps make an ID read or not); ``readers``: the text forms
    tried in order; ``fields``: decode field name -> how it is written; ``time``: the time field (shift, bits),
    with ``epoch_ns`` and ``unit_ns`` (ns per unit, exact)."""

    name: str
    packed: PackedInt
    readers: tuple[Reader, ...]
    fields: tuple[tuple[str, FieldSpec], ...]
    time: FieldSpec
    unit_ns: Fraction
    epoch_ns: int = 0
    value_max: int | None = None
    bigint: bool = False
    """The IDs fit a signed bigint column: a typed ``(bigint)`` form is made too."""
    bigint_wraps: bool = False
    """A bigint column holds the unsigned 64-bit value as two's complement (negative above 2**63 - 1)."""
    title: str = field(default="", compare=False)

    @property
    def ident(self) -> str:
        return self.name.replace("-", "_").replace(":", "_")


def _field(packed: PackedInt, name: str) -> tuple[int, int]:
    f = packed.field(name)
    return f.shift, f.bits


def _crockford_reader(dialect: _crockford.Dialect) -> Reader:
    alphabet = _crockford.ALPHABET
    top = alphabet[dialect.first_char_max]
    accepted = "".join(sorted(set(alphabet) | {alias for alias, _ in dialect.substitutions}))
    return Reader(
        f"^[0-{top}][{accepted}]{{{_crockford.ENCODED_LEN - 1}}}$",
        alphabet,
        fold="upper",
        substitutions=dialect.substitutions,
        width=_crockford.ENCODED_LEN,
    )


def _hex_reader(groups: tuple[int, ...], skip: int = 0, prefix: str = "") -> Reader:
    body = "-".join(f"[0-9a-f]{{{n}}}" for n in groups)
    return Reader(
        f"^{prefix}{body}$", HEX_DIGITS, fold="lower", skip=skip, separators=len(groups) > 1, width=sum(groups)
    )


def _uuid_groups() -> tuple[int, ...]:
    ends = (*UUID_SEPARATOR_POSITIONS, UUID_LEN)
    starts = (0, *(p + 1 for p in UUID_SEPARATOR_POSITIONS))
    return tuple(end - start for start, end in zip(starts, ends, strict=True))


UUID_READER = _hex_reader(_uuid_groups())
HEX32_READER = _hex_reader((UUID_HEX_LEN,))


def _ulid() -> Reading:
    packed = ulid_module.PACKED
    return Reading(
        ulid_module.SCHEME.name,
        packed,
        (_crockford_reader(_crockford.STRICT_ULID), UUID_READER, HEX32_READER),
        (("timestamp_ms", Bits(*_field(packed, "timestamp_ms"))), ("random", Hex(*_field(packed, "randomness")))),
        Bits(*_field(packed, "timestamp_ms")),
        Fraction(ulid_module.NANOSECS_IN_MILLISECS),
    )


def _uuidv7() -> Reading:
    packed = uuidv7_module.PACKED
    braced = _hex_reader(_uuid_groups(), skip=1, prefix="[{]")
    braced = Reader(
        braced.pattern[:-1] + "[}]$",
        braced.alphabet,
        braced.fold,
        braced.skip,
        separators=True,
        take=UUID_LEN,
        width=UUID_HEX_LEN,
    )
    urn = _hex_reader(_uuid_groups(), skip=len("urn:uuid:"), prefix="urn:uuid:")
    return Reading(
        uuidv7_module.SCHEME.name,
        packed,
        (UUID_READER, HEX32_READER, braced, urn),
        (
            ("timestamp_ms", Bits(*_field(packed, "timestamp_ms"))),
            ("rand_a", Bits(*_field(packed, "rand_a"))),
            ("rand_b", Hex(*_field(packed, "rand_b"))),
        ),
        Bits(*_field(packed, "timestamp_ms")),
        Fraction(uuidv7_module.NANOSECS_IN_MILLISECS),
    )


def _ksuid() -> Reading:
    packed = ksuid_codec.PACKED
    alphabet = ksuid_codec.BASE62_ALPHABET
    return Reading(
        ksuid.SCHEME.name,
        packed,
        (
            Reader(f"^[0-9A-Za-z]{{{ksuid_codec.BASE62_LEN}}}$", alphabet, width=ksuid_codec.BASE62_LEN),
            _hex_reader((ksuid_codec.HEX_LEN,)),
        ),
        (
            ("timestamp_s", Bits(*_field(packed, "timestamp"), offset=ksuid_codec.EPOCH_S)),
            ("payload", Hex(*_field(packed, "payload"))),
        ),
        Bits(*_field(packed, "timestamp")),
        Fraction(ksuid_codec.NANOSECS_IN_SECS),
        epoch_ns=ksuid_codec.EPOCH_S * ksuid_codec.NANOSECS_IN_SECS,
    )


def _hlc_ulid() -> Reading:
    packed = hlc_codec.PACKED
    groups = (
        hlc_codec.TIMESTAMP_HEX_LEN,
        hlc_codec.COUNTER_HEX_LEN,
        hlc_codec.PUBLISHER_ID_HEX_LEN,
        hlc_codec.RANDOM_HEX_LEN,
    )
    return Reading(
        hlc_ulid.SCHEME.name,
        packed,
        (_crockford_reader(_crockford.ULID), _hex_reader(groups)),
        tuple((f.name, Bits(f.shift, f.bits)) for f in packed.fields),
        Bits(*_field(packed, "timestamp_ms")),
        Fraction(hlc_codec.NANOSECS_IN_MILLISECS),
    )


def _wiji() -> Reading:
    packed = wiji_module.PACKED
    return Reading(
        wiji_module.SCHEME.name,
        packed,
        (_crockford_reader(_crockford.WIJI), HEX32_READER, UUID_READER),
        tuple((f.name, Bits(f.shift, f.bits)) for f in packed.fields),
        Bits(*_field(packed, "timestamp_us")),
        Fraction(wiji_module.NANOSECS_IN_MICROSECS),
    )


def _eight_byte() -> Reading:
    codec = eight_byte_codec
    packed = codec.PACKED
    mode = Bits(*_field(packed, "mode"))
    timestamp = Switch(
        mode,
        (
            (codec.Mode.SPREAD, Bits(*_field(packed, "timestamp"), reverse=True)),
            (codec.Mode.TIME_SEQUENTIAL, Bits(*_field(packed, "timestamp"))),
        ),
    )
    generator_id = Sum(
        (
            Bits(*_field(packed, "generator_id_high"), scale=1 << codec.GENERATOR_ID_LOW_BITS),
            Bits(*_field(packed, "generator_id_low")),
        )
    )
    signed_digits = len(str(codec.SIGNED_MIN)) - 1
    return Reading(
        eight_byte.SCHEME.name,
        packed,
        (
            Reader(f"^[0-9a-f]{{{codec.HEX_LEN}}}$", HEX_DIGITS, fold="lower", width=codec.HEX_LEN),
            Reader(
                f"^-[1-9][0-9]{{0,{signed_digits - 1}}}$",
                DECIMAL_DIGITS,
                skip=1,
                wrap=1 << codec.PACKED_BITS,
                width=signed_digits,
            ),
            Reader(f"^(0|[1-9][0-9]{{0,{codec.DECIMAL_LEN_MAX - 1}}})$", DECIMAL_DIGITS, width=codec.DECIMAL_LEN_MAX),
        ),
        (
            ("timestamp_ms", timestamp),
            ("sequence", Bits(*_field(packed, "sequence"))),
            ("generator_id", generator_id),
            ("cluster_id", Bits(*_field(packed, "cluster_id"))),
            ("mode", Switch(mode, tuple((m.value, Const(m.label)) for m in codec.Mode))),
        ),
        timestamp,
        Fraction(codec.NANOSECS_IN_MILLISECS),
        bigint=True,
        bigint_wraps=True,
    )


def _typeid() -> Reading:
    packed = uuidv7_module.PACKED
    version = Bits(*_field(packed, "version"))
    timestamp = Switch(version, ((uuidv7_module.VERSION, Bits(*_field(packed, "timestamp_ms"))),))
    letters = "a-z"
    prefix = f"([{letters}]|[{letters}][{letters}_]{{0,{typeid_module.PREFIX_LEN_MAX - 2}}}[{letters}])"
    dialect = _crockford.TYPEID
    alphabet = _crockford.ALPHABET.lower()
    suffix = f"[0-{alphabet[dialect.first_char_max]}][{alphabet}]{{{typeid_module.SUFFIX_LEN - 1}}}"
    return Reading(
        typeid_module.SCHEME.name,
        PackedInt("TypeID", [("uuid", 128)]),
        (
            Reader(
                f"^({prefix}{typeid_module.SEPARATOR})?{suffix}$",
                alphabet,
                take=-typeid_module.SUFFIX_LEN,
                width=typeid_module.SUFFIX_LEN,
            ),
        ),
        (
            ("prefix", TextBefore(typeid_module.SEPARATOR)),
            ("uuid", UuidText()),
            ("version", version),
            ("timestamp_ms", timestamp),
        ),
        timestamp,
        Fraction(uuidv7_module.NANOSECS_IN_MILLISECS),
    )


def _siq() -> Reading:
    codec = siq_codec
    packed = codec.PACKED
    tick_shift, _ = _field(packed, "tick")
    low_shift, low_bits = _field(packed, "low")
    base32 = codec.BASE32_ALPHABET.decode("ascii")
    # The serial field's low bits say the qualifier suffix's width w (its lowest 3 bits decide it) and the code.
    names = {code: name for name, (code, _) in codec.QUALIFIERS.items()}
    width_bits = min(codec.SUFFIX_WIDTHS)
    suffix_max = max(codec.SUFFIX_WIDTHS)
    serial = Switch(
        Bits(low_shift, width_bits),
        tuple(
            (low, Bits(low_shift + codec.suffix_width(low), low_bits - codec.suffix_width(low)))
            for low in range(1 << width_bits)
        ),
    )
    qualifier = Switch(
        Bits(low_shift, suffix_max),
        tuple((low, Const(names.get(codec.decode_low(low)[1], codec.UNASSIGNED))) for low in range(1 << suffix_max)),
    )
    did_body = f"[a-{codec.DID_FIRST_CHAR_MAX}][a-z2-7]{{{codec.DID_BODY_LEN - 1}}}"
    return Reading(
        siq.SCHEME.name,
        packed,
        (
            Reader(
                f"^{codec.DID_PREFIX}{did_body}$",
                base32,
                fold="lower",
                skip=codec.DID_PREFIX_LEN,
                checksum_bytes=codec.PACKED_BYTES,
                width=codec.DID_BODY_LEN,
            ),
            _hex_reader((codec.HEX_LEN,)),
            Reader(f"^(0|[1-9][0-9]{{0,{codec.DECIMAL_LEN_MAX - 1}}})$", DECIMAL_DIGITS, width=codec.DECIMAL_LEN_MAX),
        ),
        (
            ("seconds", Bits(tick_shift + codec.FRACTION_BITS, codec.SECONDS_BITS)),
            ("fraction", Bits(tick_shift, codec.FRACTION_BITS)),
            ("shard", Bits(*_field(packed, "shard"))),
            ("domain_hash", Bits(*_field(packed, "domain_hash"))),
            ("serial", serial),
            ("qualifier", qualifier),
        ),
        Bits(*_field(packed, "tick")),
        Fraction(codec.NANOSECS_IN_SECS, codec.TICKS_IN_SECS),
    )


def _muid() -> Reading:
    module = muid_module
    packed = module.PACKED
    groups = (module.TIMESTAMP_HEX_LEN, module.MEDALLION_HEX_LEN, module.OFFSET_HEX_LEN)
    timestamp = _field(packed, "timestamp")
    medallion = _field(packed, "medallion")
    return Reading(
        muid_module.SCHEME.name,
        packed,
        (
            _hex_reader(groups),
            Reader(
                _hex_reader(groups[:2]).pattern,
                HEX_DIGITS,
                "lower",
                separators=True,
                scale=1 << medallion[0],
                width=sum(groups[:2]),
            ),
            Reader(_hex_reader(groups[:1]).pattern, HEX_DIGITS, "lower", scale=1 << timestamp[0], width=groups[0]),
        ),
        (
            ("timestamp_us", Bits(*timestamp, all_ones=str(module.SENTINEL))),
            ("medallion", Bits(*medallion, all_ones=str(module.SENTINEL))),
            ("offset", Bits(*_field(packed, "offset"), signed=True)),
        ),
        Bits(*timestamp, all_ones="NULL"),
        Fraction(module.NANOSECS_IN_MICROSECS),
    )


def snowflake_reading(layout: snowflake_codec.Layout, name: str = snowflake.SCHEME.name) -> Reading:
    """The reading of snowflake IDs in ``layout``, made as the functions ``idmint_<name>_*``."""
    widths = {
        snowflake_codec.TIME: layout.time_bits,
        snowflake_codec.WORKER: layout.worker_bits,
        snowflake_codec.SEQUENCE: layout.sequence_bits,
    }
    packed = PackedInt(
        snowflake.SCHEME.name, [(part, widths[part]) for part in layout.order], bits=snowflake_codec.PACKED_BITS
    )
    hex_len = snowflake_codec.HEX_LEN
    decimal_max = len(str(snowflake_codec.PACKED_MAX))
    return Reading(
        name,
        packed,
        (
            Reader(f"^(0|[1-9][0-9]{{0,{decimal_max - 1}}})$", DECIMAL_DIGITS, width=decimal_max),
            Reader(
                f"^0x0*[0-9a-f]{{1,{hex_len}}}$",
                HEX_DIGITS,
                fold="lower",
                skip=len("0x"),
                width=hex_len,
                strip_zeros=True,
            ),
            Reader(f"^(?=.*[a-f])[0-9a-f]{{{hex_len}}}$", HEX_DIGITS, fold="lower", width=hex_len),
        ),
        (
            ("layout", Const(layout.name)),
            (
                "timestamp_ms",
                Bits(*_field(packed, snowflake_codec.TIME), scale=layout.unit_ms, offset=layout.epoch_ms),
            ),
            ("worker_id", Bits(*_field(packed, snowflake_codec.WORKER))),
            ("sequence", Bits(*_field(packed, snowflake_codec.SEQUENCE))),
        ),
        Bits(*_field(packed, snowflake_codec.TIME)),
        Fraction(layout.unit_ms * snowflake_codec.NANOSECS_IN_MILLISECS),
        epoch_ns=layout.epoch_ms * snowflake_codec.NANOSECS_IN_MILLISECS,
        value_max=layout.value_max,
        bigint=True,
    )


def readings(snowflake_layout: str = "twitter") -> list[Reading]:
    """Every scheme reading made, the node's snowflake layout as ``snowflake`` and each named layout as
    ``snowflake:<name>`` (functions ``idmint_snowflake_<name>_*``). Raises ValueError for a bad layout text."""
    out = [_muid(), _eight_byte(), _hlc_ulid(), _siq(), _wiji(), _uuidv7(), _ulid(), _typeid(), _ksuid()]
    out.append(snowflake_reading(snowflake_codec.Layout.parse(snowflake_layout)))
    for name, layout in snowflake_codec.NAMED_LAYOUTS.items():
        out.append(snowflake_reading(layout, f"snowflake:{name}"))
    return out


# --- SQL text ---------------------------------------------------------------------------------------------------


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class _Sql:
    """The expressions one dialect writes; ``q`` is the schema prefix ("" or ``name.``)."""

    def __init__(self, dialect: str, schema: str) -> None:
        self.dialect = dialect
        self.q = f"{schema}." if schema else ""
        self.pg = dialect == POSTGRESQL
        self.digit_readers: dict[str, tuple[str, int]] = {}
        """The digit readers the readers use: function name -> (alphabet, width)."""

    def digits_function(self, name: str, alphabet: str, width: int) -> str:
        """A function of the text of exactly ``width`` digits of ``alphabet`` (validated before: every character is
        a digit) -> its value, as unrolled integer arithmetic: chunks of digits in bigint, joined exactly."""
        base = len(alphabet)
        per_chunk = 1
        while base ** (per_chunk + 1) < 1 << 62:
            per_chunk += 1
        t = "t"
        chunks = []
        for start in range(0, width, per_chunk):
            count = min(per_chunk, width - start)
            terms = []
            for i in range(count):
                position = start + i + 1
                if self.pg:
                    digit = f"(strpos({_quote(alphabet)}, substr({t}, {position}, 1)) - 1::bigint)"
                else:
                    digit = f"(locate(CAST(substring({t}, {position}, 1) AS BINARY), {_quote(alphabet)}) - 1)"
                power = base ** (count - 1 - i)
                terms.append(digit if power == 1 else f"{digit} * {power}")
            chunks.append((" + ".join(terms), base**count))
        expr = ""
        for chunk, scale in chunks:
            if not expr:
                expr = f"CAST({chunk} AS {'numeric' if self.pg else MYSQL_DECIMAL})"
            else:
                expr = f"({expr}) * {scale} + ({chunk})"
        if self.pg:
            return _pg_function(f"{self.q}{name}", "t text", "numeric", f"SELECT {expr}")
        return _my_function(
            f"{self.q}{name}", f"t {MYSQL_TEXT}", MYSQL_DECIMAL, f"RETURN CASE WHEN t IS NOT NULL THEN {expr} END"
        )

    # value of a text
    def read(self, reader: Reader, t: str) -> tuple[str, str]:
        folded = {"upper": f"upper({t})", "lower": f"lower({t})", "": t}[reader.fold]
        body = folded
        if reader.take < 0:
            body = f"right({body}, {-reader.take})"
        elif reader.skip or reader.take:
            body = f"substr({body}, {reader.skip + 1}" + (f", {reader.take})" if reader.take else ")")
        if reader.separators:
            body = f"replace({body}, '-', '')"
        if reader.substitutions:
            src = "".join(a for a, _ in reader.substitutions)
            dst = "".join(b for _, b in reader.substitutions)
            body = (
                f"translate({body}, '{src}', '{dst}')" if self.pg else self._replace_chain(body, reader.substitutions)
            )
        if self.pg:
            cond = f"{folded} ~ {_quote(reader.pattern)}"
        else:
            # (?-i): case-sensitive whatever the collation, in MariaDB's PCRE and MySQL's ICU alike (MySQL 8.0.22+
            # refuses a binary string in REGEXP).
            cond = f"{folded} REGEXP {_quote('(?-i)' + reader.pattern)}"
        width = reader.width
        if reader.strip_zeros:
            body = f"trim(LEADING '0' FROM {body})" if not self.pg else f"ltrim({body}, '0')"
        self.digit_readers[_digits_name(reader.alphabet, width)] = (reader.alphabet, width)
        value = f"{self.q}{_digits_name(reader.alphabet, width)}(lpad({body}, {width}, '{reader.alphabet[0]}'))"
        if reader.wrap:
            value = f"{self.q}idmint__wrap({value}, {reader.wrap})"
        if reader.checksum_bytes:
            value = f"{self.q}idmint__crc_checked({value}, {1 << (8 * reader.checksum_bytes)}, {reader.checksum_bytes})"
        if reader.scale != 1:
            value = f"{value} * {reader.scale}"
        return cond, value

    @staticmethod
    def _replace_chain(body: str, substitutions: tuple[tuple[str, str], ...]) -> str:
        for alias, target in substitutions:
            body = f"replace({body}, '{alias}', '{target}')"
        return body

    def slice(self, v: str, shift: int, bits: int) -> str:
        """The integer in ``bits`` bits at ``shift`` of the packed ``v`` (exact decimal arithmetic)."""
        above = f"({v} - mod({v}, {1 << shift}))" if shift else v
        whole = f"{above} / {1 << shift}" if shift else above
        if self.pg:
            whole = f"div({v}, {1 << shift})" if shift else v
        return f"mod({whole}, {1 << bits})"

    def number(self, v: str, spec: Bits | Sum | Switch) -> str:
        """The exact integer (numeric/DECIMAL) of an integer field; NULL where a Switch has no case."""
        if isinstance(spec, Sum):
            return " + ".join(f"({self.number(v, part)})" for part in spec.parts)
        if isinstance(spec, Switch):
            selector = self.slice(v, spec.selector.shift, spec.selector.bits)
            whens = " ".join(f"WHEN {key} THEN {self.render(v, case, raw=True)}" for key, case in spec.cases)
            return f"CASE {selector} {whens} END"
        expr = self.slice(v, spec.shift, spec.bits)
        if spec.reverse:
            if self.pg:
                bit = f"bit({spec.bits})"
                expr = f"CAST(CAST(reverse(CAST(CAST(CAST({expr} AS bigint) AS {bit}) AS text)) AS {bit}) AS bigint)"
            else:
                expr = f"CAST(conv(reverse(lpad(conv({expr}, 10, 2), {spec.bits}, '0')), 2, 10) AS UNSIGNED)"
        if spec.signed:
            expr = f"CASE WHEN {expr} >= {1 << (spec.bits - 1)} THEN {expr} - {1 << spec.bits} ELSE {expr} END"
        if spec.all_ones:
            expr = f"CASE WHEN {expr} = {(1 << spec.bits) - 1} THEN {spec.all_ones} ELSE {expr} END"
        if spec.scale != 1:
            expr = f"{expr} * {spec.scale}"
        if spec.offset:
            expr = f"{expr} + {spec.offset}"
        return expr

    def integer(self, v: str, spec: Bits | Sum | Switch) -> str:
        expr = self.number(v, spec)
        negative = isinstance(spec, Bits) and (spec.signed or spec.all_ones)
        return f"CAST({expr} AS bigint)" if self.pg else f"CAST({expr} AS {'SIGNED' if negative else 'UNSIGNED'})"

    def hex(self, v: str, spec: Hex) -> str:
        digits = spec.digits
        parts = []
        low = 0
        while low < digits:
            width = min(HEX_CHUNK_DIGITS, digits - low)
            bits = min(width * HEX_DIGIT_BITS, spec.bits - low * HEX_DIGIT_BITS)
            chunk = self.slice(v, spec.shift + low * HEX_DIGIT_BITS, bits)
            if self.pg:
                parts.append(f"lpad(to_hex(CAST({chunk} AS bigint)), {width}, '0')")
            else:
                parts.append(f"lpad(lower(hex(CAST({chunk} AS UNSIGNED))), {width}, '0')")
            low += width
        return f"concat({', '.join(reversed(parts))})"

    def render(self, v: str, spec: FieldSpec, raw: bool = False, id_text: str = "id") -> str:
        """A field's SQL value from the packed ``v`` (and the ID's text ``id_text``); ``raw``: an integer field as
        an exact number, not yet cast."""
        if isinstance(spec, Bits | Sum):
            return self.number(v, spec) if raw else self.integer(v, spec)
        if isinstance(spec, Switch):
            if all(isinstance(case, Bits | Sum) for _, case in spec.cases) and not raw:
                return self.integer(v, spec)
            selector = self.slice(v, spec.selector.shift, spec.selector.bits)
            whens = " ".join(f"WHEN {key} THEN {self.render(v, case, raw, id_text)}" for key, case in spec.cases)
            return f"CASE {selector} {whens} END"
        if isinstance(spec, Hex):
            return self.hex(v, spec)
        if isinstance(spec, UuidText):
            digits = self.hex(v, Hex(0, 128))
            if self.pg:
                return f"regexp_replace({digits}, '^(.{{8}})(.{{4}})(.{{4}})(.{{4}})', '\\1-\\2-\\3-\\4-')"
            for cut in UUID_SEPARATOR_POSITIONS:  # ascending: each position counts the hyphens before it
                digits = f"insert({digits}, {cut + 1}, 0, '-')"
            return digits
        if isinstance(spec, TextBefore):
            sep, t = _quote(spec.separator), id_text
            if self.pg:
                at = f"strpos(reverse({t}), {sep})"
                return f"CASE WHEN {at} > 0 THEN left({t}, length({t}) - {at}) ELSE '' END"
            return f"substring_index({t}, {sep}, char_length({t}) - char_length(replace({t}, {sep}, '')))"
        return _quote(spec.value) if isinstance(spec.value, str) else str(spec.value)


def _digits_name(alphabet: str, width: int) -> str:
    import hashlib

    return f"idmint__digits_{hashlib.sha256(alphabet.encode()).hexdigest()[:6]}_{width}"


def _valid(sql: _Sql, reading: Reading, v: str) -> str:
    """The conditions under which packed ``v`` is an ID of the reading: below its maximum, fixed fields set, capped
    fields within their cap."""
    top = reading.packed.max if reading.value_max is None else reading.value_max
    conds = [f"{v} <= {top}"]
    for f in reading.packed.fields:
        if f.fixed is not None:
            conds.append(f"{sql.slice(v, f.shift, f.bits)} = {f.fixed}")
        elif f.max != f.mask:
            conds.append(f"{sql.slice(v, f.shift, f.bits)} <= {f.max}")
    return " AND ".join(conds)


def _time_ms(sql: _Sql, reading: Reading, v: str) -> str:
    """Unix ms (floor) of the packed ``v``: ``floor((epoch_ns + field * unit_ns) / 1e6)``, exact."""
    unit = reading.unit_ns
    numerator = f"{reading.epoch_ns * unit.denominator} + ({sql.render(v, reading.time, raw=True)}) * {unit.numerator}"
    denominator = unit.denominator * NS_IN_MS
    if sql.pg:
        return f"div({numerator}, {denominator})"
    return f"(({numerator}) - mod({numerator}, {denominator})) DIV {denominator}"


# --- PostgreSQL -----------------------------------------------------------------------------------------------------


def _pg_function(name: str, args: str, returns: str, body: str, language: str = "sql") -> str:
    """CREATE OR REPLACE FUNCTION ... IMMUTABLE STRICT PARALLEL SAFE. A ``SELECT <expression>`` body is written as
    PL/pgSQL ``RETURN <expression>``: PL/pgSQL keeps a simple expression's compiled state from call to call, where a
    SQL function that is not inlined starts an executor (and compiles its whole expression) on every call: 50 to
    100 times slower for these expressions."""
    if language == "sql" and body.startswith("SELECT "):
        language, body = "plpgsql", f"BEGIN\n  RETURN {body.removeprefix('SELECT ')};\nEND"
    return (
        f"CREATE OR REPLACE FUNCTION {name}({args}) RETURNS {returns}\n"
        f"LANGUAGE {language} IMMUTABLE STRICT PARALLEL SAFE AS $fn$\n{body}\n$fn$;\n"
    )


def _pg_helpers(q: str) -> Iterator[str]:
    yield _pg_function(
        f"{q}idmint__wrap",
        "d numeric, wrap numeric",
        "numeric",
        "SELECT CASE WHEN d <= wrap / 2 THEN wrap - d END",
    )
    table = ",".join(str(entry) for entry in _crc32_table())
    yield _pg_function(
        f"{q}idmint__crc_checked",
        "d numeric, scale numeric, bytes integer",
        "numeric",
        f"DECLARE\n  p numeric := mod(d, scale);\n  crc bigint := {CRC32_MASK};\n"
        f"  tbl CONSTANT bigint[] := '{{{table}}}';\nBEGIN\n"
        "  FOR i IN REVERSE bytes - 1 .. 0 LOOP\n"
        "    crc := tbl[((crc # CAST(mod(div(p, power(256::numeric, i)), 256) AS bigint)) & 255) + 1] # (crc >> 8);\n"
        "  END LOOP;\n"
        f"  RETURN CASE WHEN div(d, scale) = crc # {CRC32_MASK} THEN p END;\nEND",
        "plpgsql",
    )
    yield _pg_function(
        f"{q}idmint__ms_time",
        "ms bigint",
        "timestamptz",
        f"SELECT CASE WHEN ms >= 0 AND ms < {TIME_END_MS} THEN timestamptz '1970-01-01 00:00:00+00'"
        " + (ms / 1000) * interval '1 second' + (ms % 1000) * interval '1 millisecond' END",
    )


def _pg_reading(sql: _Sql, r: Reading) -> Iterator[str]:
    q, s = sql.q, r.ident
    cases = "\n".join(f"  WHEN {cond} THEN {expr}" for cond, expr in (sql.read(rd, "id") for rd in r.readers))
    yield _pg_function(
        f"{q}idmint_{s}__valid", "v numeric", "numeric", f"SELECT CASE WHEN {_valid(sql, r, 'v')} THEN v END"
    )
    yield _pg_function(
        f"{q}idmint_{s}_value", "id text", "numeric", f"SELECT {q}idmint_{s}__valid(CASE\n{cases}\n  END)"
    )
    yield _pg_function(
        f"{q}idmint_{s}__time_of",
        "v numeric",
        "timestamptz",
        f"SELECT {q}idmint__ms_time(CAST({_time_ms(sql, r, 'v')} AS bigint))",
    )
    pairs = ", ".join(f"{_quote(name)}, {sql.render('v', spec)}" for name, spec in r.fields)
    yield _pg_function(
        f"{q}idmint_{s}__fields_of", "v numeric, id text", "jsonb", f"SELECT jsonb_build_object({pairs})"
    )
    yield _pg_function(
        f"{q}idmint_{s}_time", "id text", "timestamptz", f"SELECT {q}idmint_{s}__time_of({q}idmint_{s}_value(id))"
    )
    yield _pg_function(
        f"{q}idmint_{s}_fields",
        "id text",
        "jsonb",
        f"SELECT {q}idmint_{s}__fields_of({q}idmint_{s}_value(id), id)",
    )
    if r.bigint:
        value = _bigint_value(r, "id")
        yield _pg_function(f"{q}idmint_{s}_time", "id bigint", "timestamptz", f"SELECT {q}idmint_{s}__time_of({value})")
        yield _pg_function(
            f"{q}idmint_{s}_fields", "id bigint", "jsonb", f"SELECT {q}idmint_{s}__fields_of({value}, '')"
        )


def _bigint_value(r: Reading, column: str) -> str:
    """The packed value of a bigint column's ID: two's complement undone (eight-byte's signed form), or NULL
    outside the layout (a negative snowflake)."""
    top = r.value_max if r.value_max is not None else r.packed.max
    if r.bigint_wraps:
        return f"CASE WHEN {column} < 0 THEN {column} + {1 << r.packed.bits} ELSE {column} END"
    return f"CASE WHEN {column} >= 0 AND {column} <= {top} THEN {column} END"


def _dispatch_names(all_readings: list[Reading]) -> list[tuple[str, str]]:
    """(scheme name as given to idmint_time, the function stem) for the by-name functions."""
    return [(r.name, r.ident) for r in all_readings]


def postgresql(all_readings: list[Reading], schema: str = "") -> str:
    """The PostgreSQL DDL (CREATE OR REPLACE: running it again updates the functions)."""
    sql = _Sql(POSTGRESQL, schema)
    q = sql.q
    parts = [f"CREATE SCHEMA IF NOT EXISTS {schema};\n"] if schema else []
    parts.extend(_pg_helpers(q))
    functions = [part for r in all_readings for part in _pg_reading(sql, r)]
    parts.extend(sql.digits_function(name, *spec) for name, spec in sorted(sql.digit_readers.items()))
    parts.extend(functions)
    names = _dispatch_names(all_readings)
    for kind, returns in (("time", "timestamptz"), ("fields", "jsonb")):
        whens = "\n".join(f"  WHEN {_quote(name)} THEN {q}idmint_{stem}_{kind}(id)" for name, stem in names)
        yield_body = f"SELECT CASE scheme\n{whens}\n  END"
        parts.append(_pg_function(f"{q}idmint_{kind}", "scheme text, id text", returns, yield_body))
        parts.append(
            _pg_function(f"{q}idmint_{kind}", "id uuid", returns, f"SELECT {q}idmint_uuidv7_{kind}(CAST(id AS text))")
        )
    return "\n".join(parts)


# --- MySQL / MariaDB -----------------------------------------------------------------------------------------------

MYSQL_TEXT = "VARCHAR(255)"
"""The text argument type of the MySQL functions (longer IDs are no IDs: NULL)."""
MYSQL_DECIMAL = "DECIMAL(65,0)"


def _my_function(name: str, args: str, returns: str, body: str) -> str:
    return (
        f"DROP FUNCTION IF EXISTS {name}//\n"
        f"CREATE FUNCTION {name}({args}) RETURNS {returns}\nDETERMINISTIC NO SQL\n{body}//\n"
    )


def _my_helpers(q: str) -> Iterator[str]:
    yield _my_function(
        f"{q}idmint__wrap",
        f"d {MYSQL_DECIMAL}, wrap {MYSQL_DECIMAL}",
        MYSQL_DECIMAL,
        "RETURN CASE WHEN d <= wrap / 2 THEN wrap - d END",
    )
    yield _my_function(
        f"{q}idmint__crc_checked",
        f"d {MYSQL_DECIMAL}, scale {MYSQL_DECIMAL}, bytes INT",
        MYSQL_DECIMAL,
        f"BEGIN\n  DECLARE p {MYSQL_DECIMAL};\n  DECLARE x {MYSQL_DECIMAL};\n  DECLARE h VARCHAR(128) DEFAULT '';\n"
        "  DECLARE i INT DEFAULT 0;\n  IF d IS NULL THEN RETURN NULL; END IF;\n  SET p = MOD(d, scale);\n  SET x = p;\n"
        "  WHILE i < bytes DO\n    SET h = CONCAT(LPAD(HEX(MOD(x, 256)), 2, '0'), h);\n"
        "    SET x = (x - MOD(x, 256)) / 256;\n    SET i = i + 1;\n  END WHILE;\n"
        "  RETURN CASE WHEN (d - p) / scale = CRC32(UNHEX(h)) THEN p END;\nEND",
    )
    yield _my_function(
        f"{q}idmint__ms_time",
        "ms BIGINT",
        "DATETIME(3)",
        f"RETURN CASE WHEN ms >= 0 AND ms < {TIME_END_MS} THEN"
        " CAST(TIMESTAMPADD(MICROSECOND, ms * 1000, TIMESTAMP '1970-01-01 00:00:00') AS DATETIME(3)) END",
    )


def _my_reading(sql: _Sql, r: Reading) -> Iterator[str]:
    q, s = sql.q, r.ident
    cases = "\n".join(f"    WHEN {cond} THEN {expr}" for cond, expr in (sql.read(rd, "id") for rd in r.readers))
    yield _my_function(
        f"{q}idmint_{s}_value",
        f"id {MYSQL_TEXT}",
        MYSQL_DECIMAL,
        f"BEGIN\n  DECLARE v {MYSQL_DECIMAL};\n  IF id IS NULL OR CHAR_LENGTH(id) > 64 THEN RETURN NULL; END IF;\n"
        f"  SET v = CASE\n{cases}\n  END;\n"
        f"  RETURN CASE WHEN {_valid(sql, r, 'v')} THEN v END;\nEND",
    )
    yield _my_function(
        f"{q}idmint_{s}__time_of",
        f"v {MYSQL_DECIMAL}",
        "DATETIME(3)",
        f"RETURN {q}idmint__ms_time({_time_ms(sql, r, 'v')})",
    )
    pairs = ", ".join(f"{_quote(name)}, {sql.render('v', spec)}" for name, spec in r.fields)
    yield _my_function(
        f"{q}idmint_{s}__fields_of",
        f"v {MYSQL_DECIMAL}, id {MYSQL_TEXT}",
        "JSON",
        f"RETURN CASE WHEN v IS NOT NULL THEN JSON_OBJECT({pairs}) END",
    )
    yield _my_function(
        f"{q}idmint_{s}_time",
        f"id {MYSQL_TEXT}",
        "DATETIME(3)",
        f"RETURN {q}idmint_{s}__time_of({q}idmint_{s}_value(id))",
    )
    yield _my_function(
        f"{q}idmint_{s}_fields",
        f"id {MYSQL_TEXT}",
        "JSON",
        f"RETURN {q}idmint_{s}__fields_of({q}idmint_{s}_value(id), id)",
    )
    if r.bigint:
        value = _bigint_value(r, "id")
        yield _my_function(
            f"{q}idmint_{s}_time_bigint", "id BIGINT", "DATETIME(3)", f"RETURN {q}idmint_{s}__time_of({value})"
        )
        yield _my_function(
            f"{q}idmint_{s}_fields_bigint", "id BIGINT", "JSON", f"RETURN {q}idmint_{s}__fields_of({value}, '')"
        )


def mysql(all_readings: list[Reading], schema: str = "") -> str:
    """The MySQL/MariaDB DDL for the ``mysql``/``mariadb`` command-line client (``DELIMITER //``)."""
    sql = _Sql(MYSQL, schema)
    q = sql.q
    parts = [f"CREATE DATABASE IF NOT EXISTS {schema};\n"] if schema else []
    parts.append("DELIMITER //\n")
    parts.extend(_my_helpers(q))
    functions = [part for r in all_readings for part in _my_reading(sql, r)]
    parts.extend(sql.digits_function(name, *spec) for name, spec in sorted(sql.digit_readers.items()))
    parts.extend(functions)
    names = _dispatch_names(all_readings)
    for kind, returns in (("time", "DATETIME(3)"), ("fields", "JSON")):
        whens = "\n".join(f"    WHEN {_quote(name)} THEN {q}idmint_{stem}_{kind}(id)" for name, stem in names)
        parts.append(
            _my_function(
                f"{q}idmint_{kind}",
                f"scheme VARCHAR(64), id {MYSQL_TEXT}",
                returns,
                f"RETURN CASE scheme\n{whens}\n  END",
            )
        )
    parts.append("DELIMITER ;\n")
    return "\n".join(parts)


def functions_ddl(dialect: str, schema: str = "", snowflake_layout: str = "twitter") -> str:
    """The DDL creating every function in ``dialect`` (:data:`DIALECTS`), in ``schema`` when given (an SQL
    identifier, not quoted). Raises ValueError for an unknown dialect or snowflake layout."""
    found = readings(snowflake_layout)
    if dialect == POSTGRESQL:
        return postgresql(found, schema)
    if dialect == MYSQL:
        return mysql(found, schema)
    raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, got {dialect!r}")
