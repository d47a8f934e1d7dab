"""TypeID: a type prefix and a UUID (a UUIDv7 when issued) in lowercase base32.

Follows the TypeID specification v0.3 (``github.com/jetify-com/typeid``, ``spec/README.md``) and
docs/schemes/typeid.md::

    text:   prefix _ suffix              e.g.  user_01h455vb4pex5vsknk084sn02q
            |      | └ 26 characters of 0123456789abcdefghjkmnpqrstvwxyz: 2 zero bits + the UUID's 128 bits,
            |      |   5 bits a character, most significant first (first character 0..7)
            |      └ separator, omitted when the prefix is empty
            └ 0..63 characters of a-z and '_', not starting or ending with '_'

    suffix value (128 bits) = the UUID, as issued here a UUIDv7 (see app.schemes.uuidv7):
    127                         80 79  76 75        64 63 62 61                                        0
    +-----------------------------+------+------------+-----+------------------------------------------+
    |   unix_ts_ms (48 bits)      | ver  |  rand_a    | var |  rand_b (62 bits)                        |
    +-----------------------------+------+------------+-----+------------------------------------------+
    typeid (canonical): prefix_suffix (or the bare suffix);   uuid: 8-4-4-4-12 lowercase hex of the UUID

Any UUID version is accepted when decoding (the spec lets users encode other versions): ``timestamp_ms`` is the
UUID's top 48 bits when its version is 7 and ``null`` otherwise. Nothing but the two spellings above is accepted:
no uppercase, no hyphens, no Crockford substitutions (I, L, O, U), no whitespace.

The packed value of a TypeID is its UUID's 128-bit integer; the prefix is part of the ID. :meth:`TypeIdScheme.parse`
returns a :class:`TypeId`, an ``int`` (the UUID) that carries its ``prefix``, so code that treats the value as an
integer keeps working while ``fields``/``format``/``canonical`` of that value give the prefix back.

Issuing shares the uuidv7 generator of the node (``shares_generator_with = "uuidv7"``): :class:`TypeIdGenerator`
wraps a :class:`~app.schemes.uuidv7.Uuidv7Generator`, and :class:`TypeIdBatch` wraps its batch, adding the prefix.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar, cast

import numpy as np
import numpy.typing as npt

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import _columns, _crockford, _text
from app.schemes import time_order as order
from app.schemes._uuid_text import uuid_text
from app.schemes.base import (
    SMALL_BATCH,
    Batch,
    Clock,
    Generator,
    GeneratorStats,
    LayoutField,
    RandomSource,
    Scheme,
    SchemeOption,
    SchemeSettings,
    csprng,
)
from app.schemes.uuidv7 import (
    COUNTER_LOW_BITS,
    COUNTER_LOW_MASK,
    FLAGS,
    NANOSECS_IN_MILLISECS,
    PACKED_BYTES,
    RAND_A_SHIFT,
    TAIL_BITS,
    TIMESTAMP_MS_MAX,
    TIMESTAMP_SHIFT,
    VERSION,
    VERSION_MASK,
    VERSION_SHIFT,
    Uuidv7Batch,
    Uuidv7Generator,
    Uuidv7Scheme,
)
from app.schemes.uuidv7 import SCHEME as UUIDV7_SCHEME

# --- layout -------------------------------------------------------------------------------------------------------

PREFIX_LEN_MAX = 63
SEPARATOR = "_"
SUFFIX_LEN = _crockford.ENCODED_LEN  # 26
UUID_LEN = _columns.UUID_LEN  # 36
VALUE_MAX = (1 << 128) - 1
_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz_")
PREFIX_RULE = "0..63 lowercase ASCII letters a-z and '_', not starting or ending with '_'"
SCALAR_COUNT_MAX = SMALL_BATCH
"""Batches up to this size are formatted per ID (cheaper than setting up the columns)."""

# Suffix characters of an issued TypeID (a UUIDv7 whose rand_a and rand_b top 30 bits are a 42-bit counter):
#   0..9 the millisecond; 10..15 counter bits 41..18 (+ version, variant); 16..18 counter bits 17..3;
#   19 counter bits 2..0 and tail bits 31..30; 20..22 tail bits 29..15; 23..25 tail bits 14..0.
COUNTER_RUN_BITS = 18
"""Along a run of counters agreeing above bit 17, characters 0..15 are constant (the template row)."""
COUNTER_CHARS_COLUMN = 16
COUNTER_CHARS_SHIFT = 3
"""Characters 16..18 hold counter bits 17..3."""
MIXED_CHAR_COLUMN = 19
MIXED_COUNTER_MASK = (1 << COUNTER_CHARS_SHIFT) - 1
TAIL_TOP_BITS = 2
"""Character 19 holds counter bits 2..0, then tail bits 31..30."""
TAIL_WORD_COLUMN = MIXED_CHAR_COLUMN
"""Characters 19..25 and the byte after the text (newline or closing quote): one ``<u8`` per ID, the OR of three
lookups (character 19; 20..22 = tail bits 29..15; 23..25 and the byte after = tail bits 14..0)."""
TAIL_TRIPLE_SHIFT = _columns.TRIPLE_BITS  # 15
MIXED_TAIL_SHIFT = TAIL_BITS - TAIL_TOP_BITS  # 30
_BYTE_BITS = 8
_MIDDLE_TRIPLE_BYTE = 1
"""Characters 20..22 sit at bytes 1..3 of the tail word (character 19 at byte 0)."""
_LAST_TRIPLE_BYTE = 4
"""Characters 23..25 sit at bytes 4..6 of the tail word, the byte after the text at byte 7."""
_THREE_CHARS_MASK = (1 << 3 * _BYTE_BITS) - 1


@functools.lru_cache(maxsize=1)
def _mixed_counter_bits() -> npt.NDArray[np.intp]:
    """``(i & 7) << 2`` for i in 0 .. 2**18 + 6: counter bits 2..0 in place in character 19's 5-bit value. A run
    whose first counter is ``first`` reads them from ``first & 7`` on (a run holds at most 2**18 counters)."""
    bits = (
        np.arange((1 << COUNTER_RUN_BITS) + MIXED_COUNTER_MASK, dtype=np.intp) & MIXED_COUNTER_MASK
    ) << TAIL_TOP_BITS
    bits.flags.writeable = False
    return bits


@functools.lru_cache(maxsize=1)
def _counter_table() -> npt.NDArray[np.uint32]:
    """Characters 16..18 (then a byte overwritten later) for every value of counter bits 17..0: 2**18 ``<u4``."""
    table = np.repeat(_columns.base32_triples(lowercase=True), 1 << COUNTER_CHARS_SHIFT)
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=1)
def _mixed_table() -> npt.NDArray[np.uint64]:
    """Character 19 (byte 0 of the tail word) for every 5-bit value: 32 ``<u8``."""
    table = np.frombuffer(_crockford.ALPHABET.lower().encode("ascii"), dtype=np.uint8).astype(np.uint64)
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=4)
def _triple_words(last: bool, pad: int) -> npt.NDArray[np.uint64]:
    """For every 15-bit value, its 3 characters at bytes 1..3 of the tail word, or with ``last`` at bytes 4..6 and
    ``pad`` at byte 7: 32,768 ``<u8``."""
    triples = _columns.base32_triples(lowercase=True, pad=pad).astype(np.uint64)
    if last:
        table = triples << np.uint64(_BYTE_BITS * _LAST_TRIPLE_BYTE)
    else:
        table = (triples & np.uint64(_THREE_CHARS_MASK)) << np.uint64(_BYTE_BITS * _MIDDLE_TRIPLE_BYTE)
    table.flags.writeable = False
    return table


# --- the TypeID value ---------------------------------------------------------------------------------------------


class TypeId(int):
    """A parsed TypeID: the UUID's 128-bit integer (this int) and its ``prefix`` ("" when bare).

    Arithmetic on it gives plain ints (the prefix does not travel); equality and hashing are the UUID's.
    """

    prefix: str

    def __new__(cls, value: int, prefix: str = "") -> TypeId:
        obj = super().__new__(cls, value)
        obj.prefix = prefix
        return obj

    def __repr__(self) -> str:
        return f"TypeId({int(self):#034x}, prefix={self.prefix!r})"


def prefix_problem(prefix: str) -> str | None:
    """The rule ``prefix`` breaks as a TypeID prefix (spec v0.3, "Type Prefix"), or None."""
    if len(prefix) > PREFIX_LEN_MAX:
        return f"TypeID prefix must be at most {PREFIX_LEN_MAX} characters, got {len(prefix)}"
    if not _PREFIX_CHARS.issuperset(prefix):
        position, char = next((i, c) for i, c in enumerate(prefix) if c not in _PREFIX_CHARS)
        return (
            f"TypeID prefix must contain only lowercase ASCII letters a-z and '_', got {char!r} at position {position}"
        )
    if prefix.startswith(SEPARATOR):
        return "TypeID prefix must not start with '_'"
    if prefix.endswith(SEPARATOR):
        return "TypeID prefix must not end with '_'"
    return None


# --- codec: value + prefix <-> text -------------------------------------------------------------------------------


def encode_suffix(value: int) -> str:
    """The 26-character lowercase base32 suffix of a 128-bit UUID value; ValueError outside 0 .. 2**128 - 1."""
    return _crockford.encode(value).lower()


def encode_typeid(value: int, prefix: str = "") -> str:
    """The canonical text ``prefix_suffix`` (or the bare suffix); ValueError for a bad prefix or value."""
    problem = prefix_problem(prefix)
    if problem:
        raise ValueError(problem)
    suffix = encode_suffix(value)
    return f"{prefix}{SEPARATOR}{suffix}" if prefix else suffix


def decode_typeid(text: str) -> TypeId:
    """Parse ``prefix_suffix`` or a bare suffix strictly (spec v0.3): returns the UUID value carrying its prefix.

    Raises InvalidIdError naming the rule broken: empty text, a separator without a prefix, a prefix rule, the
    suffix length, alphabet (lowercase only, no substitutions) or first character above 7.
    """
    if not text:
        raise InvalidIdError("TypeID must not be empty")
    prefix, separator, suffix = text.rpartition(SEPARATOR)
    if separator and not prefix:
        raise InvalidIdError("TypeID with an empty prefix must omit the '_' separator")
    problem = prefix_problem(prefix)
    if problem:
        raise InvalidIdError(problem)
    return TypeId(_crockford.decode(suffix, _crockford.TYPEID), prefix)


def uuid_version(value: int) -> int:
    """The UUID's version nibble (bits 79..76)."""
    return (value >> VERSION_SHIFT) & VERSION_MASK


# --- scheme -------------------------------------------------------------------------------------------------------


class TypeIdScheme(Scheme):
    """TypeID: metadata, strict parser, text forms, field decoding (jetify-com/typeid spec v0.3)."""

    name = "typeid"
    packed_bytes = PACKED_BYTES
    formats = ("typeid", "uuid")
    rising_formats = {"typeid": {}, "uuid": {}}
    """Every form rises: the uuidv7 generator's monotonic values, one answer's prefix the same on every ID."""
    text_width = {"uuid": UUID_LEN}
    """``typeid`` is 26 characters plus the prefix and separator: not a fixed width."""
    timestamp_digits = 3
    native_unit_ns = NANOSECS_IN_MILLISECS
    timestamp_native_max = TIMESTAMP_MS_MAX
    public_split = Uuidv7Scheme.public_split
    """The UUIDv7's split (one generator): the public form is the public UUID in TypeID text, the prefix kept."""
    layout = (
        LayoutField("prefix", "text", "type prefix: 0..63 characters a-z and '_' (not part of the 128 bits)"),
        LayoutField("timestamp_ms", "127..80", "the UUIDv7's unix_ts_ms (milliseconds since the Unix epoch)"),
        LayoutField("version", "79..76", "the UUID's version: 7 when issued here"),
        LayoutField("rand_a", "75..64", "the UUIDv7's rand_a"),
        LayoutField("variant", "63..62", "binary 10 when issued here"),
        LayoutField("rand_b", "61..0", "the UUIDv7's rand_b"),
    )
    identity = None
    uniqueness_note = "the UUIDv7 it wraps (random bits; it shares uuidv7's generator); no slice needed"
    reference = "TypeID specification v0.3 (github.com/jetify-com/typeid, spec/); docs/schemes/typeid.md"

    # --- what the service learns from the scheme (app/schemes/base.py) ---
    title = "TypeID (jetify, spec v0.3)"
    example = "user_01h455vb4pex5vsknk084sn02q"
    captions = {
        "prefix": "Type prefix (may be empty)",
        "uuid": "UUID (8-4-4-4-12)",
        "version": "UUID version (7 when issued by a UUIDv7 generator)",
        "timestamp_ms": "Timestamp (milliseconds since the Unix epoch; only for UUID version 7)",
    }
    # the TypeID shape, also near misses (uppercase, a prefix too long) so that their errors are shown
    token_pattern: ClassVar[str | None] = r"(?:[A-Za-z](?:[A-Za-z_]{0,78}[A-Za-z])?_)?[0-9A-Za-z]{26}"
    options: ClassVar[tuple[SchemeOption, ...]] = (
        SchemeOption(
            "type",
            "prefix",
            f"The TypeID prefix (type): {PREFIX_RULE}; default none (the bare suffix).",
        ),
    )
    shares_generator_with: ClassVar[str | None] = "uuidv7"

    def parse_option(self, name: str, text: str) -> Any:
        """``type``: the prefix, returned as is when it follows the rules; InvalidOptionError naming the rule."""
        if name != "type":
            raise InvalidOptionError(f"{self.name} takes only the option 'type', got {name!r}")
        problem = prefix_problem(text)
        if problem:
            raise InvalidOptionError(f"type: {problem}")
        return text

    def new_generator(
        self,
        settings: SchemeSettings,
        identities: list[int],
        floor: int,
        clock: Clock,
        random: RandomSource = csprng,
    ) -> TypeIdGenerator:
        """A TypeID generator around a new uuidv7 generator (``floor`` in ms). A node sharing one uuidv7 generator
        between the two schemes wraps it with :meth:`generator_around` instead.
        """
        if identities:
            raise ValueError(f"{self.name} leases no identity, got {identities}")
        return TypeIdGenerator(Uuidv7Generator(clock=clock, rng=random, floor=floor))

    def generator_around(self, shared: Generator) -> TypeIdGenerator:
        """A TypeID generator issuing from ``shared``, the node's uuidv7 generator."""
        if not isinstance(shared, Uuidv7Generator):
            raise TypeError(f"typeid shares a uuidv7 generator, got {type(shared).__name__}")
        return TypeIdGenerator(shared)

    def share_generator(self, generator: Generator) -> TypeIdGenerator:
        """The node's TypeID generator on top of its uuidv7 generator (:attr:`shares_generator_with`): one
        monotonic sequence for both schemes; the prefix stays here (the uuidv7 generator never sees it)."""
        return self.generator_around(generator)

    def words(self, fields: dict[str, Any]) -> dict[str, str]:
        """``prefix`` as 'type "user"' (or "no type prefix"), ``version`` as "UUID version 7"."""
        prefix = fields["prefix"]
        return {
            "prefix": f'type "{prefix}"' if prefix else "no type prefix",
            "version": f"UUID version {fields['version']}",
        }

    def summary(self, fields: dict[str, Any]) -> str:
        """'type "user", UUID version 7'."""
        words = self.words(fields)
        return f"{words['prefix']}, {words['version']}"

    # --- codec ---

    def parse(self, text: str) -> TypeId:
        """``prefix_suffix`` or a bare suffix; returns a :class:`TypeId` (the UUID int carrying its prefix).

        Raises InvalidIdError naming the rule broken.
        """
        return decode_typeid(text)

    def format(self, value: int, fmt: str) -> str:
        """``typeid`` (canonical; the prefix is ``value.prefix`` for a :class:`TypeId`, else none) or ``uuid``."""
        if self.resolve_format(fmt) == "uuid":
            _check_value(value)
            return uuid_text(value)
        return encode_typeid(int(value), getattr(value, "prefix", ""))

    def fields(self, value: int) -> dict[str, Any]:
        """``{"prefix": str, "uuid": "<8-4-4-4-12>", "version": int, "timestamp_ms": int | None}``."""
        _check_value(value)
        version = uuid_version(value)
        return {
            "prefix": getattr(value, "prefix", ""),
            "uuid": uuid_text(value),
            "version": version,
            "timestamp_ms": value >> TIMESTAMP_SHIFT if version == VERSION else None,
        }

    backfills = True

    def backfill_value(
        self, settings: Any, tick: int, identity: int, sequence: int, random: RandomSource, options: Mapping[str, Any]
    ) -> TypeId:
        """A back-dated UUIDv7 (:meth:`Uuidv7Scheme.backfill_value`) carrying the prefix asked (``type``)."""
        value = UUIDV7_SCHEME.backfill_value(settings, tick, identity, sequence, random, options)
        return TypeId(value, options.get("prefix") or "")

    def public_text(self, public: int, text: str, batch: Batch | None) -> str:
        """The public UUID as a TypeID with the batch's prefix (``user_...``)."""
        return encode_typeid(public, getattr(batch, "prefix", ""))

    def public_value(self, text: str) -> tuple[int, str] | None:
        """A TypeID's public text: (the public UUID, its prefix), or None."""
        try:
            value = decode_typeid(text)
        except InvalidIdError:
            return None
        return int(value), value.prefix

    def public_revealed(self, value: int, context: str) -> int:
        """The revealed UUID as a :class:`TypeId` of the public text's prefix."""
        return TypeId(value, context)

    time_order_takes = ("type",)

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """TypeIDs sort by their UUIDv7 ms timestamp in uuid, bytea (16 bytes) and text (``type_suffix``) columns;
        ``type`` is the prefix the text column's IDs carry (default none). Raises InvalidOptionError for a prefix
        that breaks the rules."""
        prefix = self.parse_option("type", options["type"]) if "type" in options else ""
        return order.sixteen_bytes(
            TIMESTAMP_SHIFT,
            NANOSECS_IN_MILLISECS,
            TIMESTAMP_MS_MAX,
            f"typeid ({prefix or 'no'} prefix)",
            lambda value: encode_typeid(value, prefix),
            label=f"type {prefix!r}",
            note="A text column sorts TypeIDs by prefix first: the bounds hold for IDs of this type (type=) only.",
        )

    def timestamp_ns(self, value: int) -> int | None:
        """The UUIDv7 timestamp as ns since the epoch; None for another UUID version."""
        _check_value(value)
        if uuid_version(value) != VERSION:
            return None
        return (value >> TIMESTAMP_SHIFT) * NANOSECS_IN_MILLISECS


def _check_value(value: int) -> None:
    if not 0 <= value <= VALUE_MAX:
        raise ValueError(f"a TypeID's UUID must be in 0..2**128-1, got {value}")


SCHEME = TypeIdScheme()


# --- batch encoding -----------------------------------------------------------------------------------------------


class TypeIdBatch(Batch):
    """TypeIDs issued together: a uuidv7 batch and one prefix.

    ``typeid`` text: rows start as ``prefix_`` plus the suffix characters 0..9 of the run's millisecond; suffix
    characters 10..25 are laid down column-wise from the UUIDs' low 80 bits (see :mod:`app.schemes._columns`).
    ``uuid`` text is the uuidv7 batch's own.
    """

    def __init__(self, uuids: Uuidv7Batch, prefix: str = "") -> None:
        self.uuids = uuids
        self.prefix = prefix
        self.count = uuids.count

    def encode(self, fmt: str) -> bytes:
        """The batch as ``typeid`` or ``uuid`` lines; InvalidOptionError for another format."""
        if SCHEME.resolve_format(fmt) == "uuid":
            return self.uuids.encode("uuid")
        lead = f"{self.prefix}{SEPARATOR}" if self.prefix else ""  # the prefix was checked when the batch was made
        if self.count <= SCALAR_COUNT_MAX:
            return "".join([f"{lead}{encode_suffix(value)}\n" for value in self.uuids.values()]).encode("ascii")
        runs = self._runs()
        rows = _columns.template_rows(self._templates(lead, runs))
        self._write_varying(rows, len(lead), False, runs)
        return rows.tobytes()

    def encode_lines(self, fmt: str) -> bytes | bytearray:
        """:meth:`encode`'s text in a fresh ``bytearray`` (``bytes`` for a batch small enough for the scalar path):
        the rows are written where the caller gets them, with no copy to ``bytes``."""
        if SCHEME.resolve_format(fmt) == "uuid":
            return self.uuids.encode_lines("uuid")
        if self.count <= SCALAR_COUNT_MAX:
            return self.encode(fmt)
        lead = f"{self.prefix}{SEPARATOR}" if self.prefix else ""
        runs = self._runs()
        buffer, rows = _text.fresh_rows(self._templates(lead, runs))
        self._write_varying(rows, len(lead), False, runs)
        return buffer

    def json_members(self, fmt: str) -> bytes | bytearray | memoryview | None:
        """The batch as JSON array members ``"ID1",...,"IDn"`` (see :meth:`Batch.json_members`): ``typeid`` rows
        ``"ID",`` from the same templates and tables as :meth:`encode`, the text one byte in; ``uuid`` the uuidv7
        batch's own. None for a batch small enough for the scalar path; InvalidOptionError for another format."""
        if SCHEME.resolve_format(fmt) == "uuid":
            return self.uuids.json_members("uuid")
        if self.count <= SCALAR_COUNT_MAX:
            return None
        lead = f"{self.prefix}{SEPARATOR}" if self.prefix else ""
        runs = self._runs()
        rows = _text.json_rows([((lead + encode_suffix(base)).encode("ascii"), count) for base, _, count in runs])
        self._write_varying(rows, len(lead) + 1, True, runs)  # a member's byte 0 holds the opening quote
        return rows.reshape(-1).data[:-1]  # the last row's comma dropped

    @staticmethod
    def _templates(lead: str, runs: list[tuple[int, int, int]]) -> list[tuple[bytes, int]]:
        """Each :meth:`_runs` run's template line (``lead``, the suffix of the run's base, a newline) and count."""
        return [((lead + encode_suffix(base) + "\n").encode("ascii"), count) for base, _, count in runs]

    def _write_varying(
        self, rows: npt.NDArray[np.uint8], start: int, members: bool, runs: list[tuple[int, int, int]]
    ) -> None:
        """Write suffix characters 16..25 and the byte after them (newline, or with ``members`` the closing quote)
        into ``rows``, one ID per row, its suffix at byte ``start``; characters 0..15 come from the :meth:`_runs`
        run's template (``runs``)."""
        # Characters 16..18: counter bits 17..3, from slices of a table indexed by counter bits 17..0 (the entry's
        # 4th byte, on character 19, is overwritten by the tail word).
        _text.write_runs(rows, start + COUNTER_CHARS_COLUMN, [(_counter_table(), f, n) for _, f, n in runs])
        count = self.count
        tails = cast("npt.NDArray[np.intp]", _text.scratch("typeid-tails", count, np.intp))
        np.copyto(tails, np.frombuffer(self.uuids.tails, dtype=">u4", count=count), casting="safe")
        index = cast("npt.NDArray[np.intp]", _text.scratch("typeid-index", count, np.intp))
        word = _text.scratch("typeid-word", count, np.uint64)
        other = _text.scratch("typeid-other", count, np.uint64)
        pad = _text.QUOTE if members else _text.NEWLINE
        # Characters 23..25 and the byte after the text: tail bits 14..0.
        np.bitwise_and(tails, _columns.TRIPLE_MASK, out=index)
        np.take(_triple_words(True, pad), index, out=word, mode="wrap")  # indices are in range: no check
        # Characters 20..22: tail bits 29..15.
        np.right_shift(tails, TAIL_TRIPLE_SHIFT, out=index)
        np.bitwise_and(index, _columns.TRIPLE_MASK, out=index)
        np.take(_triple_words(False, pad), index, out=other, mode="wrap")
        np.bitwise_or(word, other, out=word)
        # Character 19: counter bits 2..0, then tail bits 31..30.
        np.right_shift(tails, MIXED_TAIL_SHIFT, out=tails)
        done = 0
        for _, first, n in runs:
            low = first & MIXED_COUNTER_MASK
            np.bitwise_or(_mixed_counter_bits()[low : low + n], tails[done : done + n], out=index[done : done + n])
            done += n
        np.take(_mixed_table(), index, out=other, mode="wrap")
        np.bitwise_or(word, other, out=word)
        _text.char_view(rows, start + TAIL_WORD_COLUMN, "<u8")[...] = word

    def _runs(self) -> list[tuple[int, int, int]]:
        """``(UUID with counter bits 17..0 and the tail zero, first counter bits 17..0, count)`` per run of IDs
        whose counters agree above bit 17: suffix characters 0..15 are constant along a run."""
        out: list[tuple[int, int, int]] = []
        for seg in self.uuids.segments:
            base = seg.tick << TIMESTAMP_SHIFT | FLAGS
            counter, end = seg.first, seg.first + seg.count
            while counter < end:
                high = counter >> COUNTER_RUN_BITS << COUNTER_RUN_BITS
                taken = min(end, high + (1 << COUNTER_RUN_BITS)) - counter
                value = base | (high >> COUNTER_LOW_BITS) << RAND_A_SHIFT | (high & COUNTER_LOW_MASK) << TAIL_BITS
                out.append((value, counter - high, taken))
                counter += taken
        return out

    def values(self) -> list[int]:
        """The UUIDs' packed integers (the prefix is :attr:`prefix`)."""
        return self.uuids.values()

    @property
    def high_water(self) -> int:
        return self.uuids.high_water


# --- generator ----------------------------------------------------------------------------------------------------


class TypeIdGenerator(Generator):
    """Issues TypeIDs from a uuidv7 generator (shared with the node's uuidv7 scheme: one monotonic sequence).

    Clock, randomness, floor, high-water mark and stats are the wrapped generator's.
    """

    def __init__(self, uuids: Uuidv7Generator) -> None:
        self.uuids = uuids

    @property
    def stats(self) -> GeneratorStats:  # type: ignore[override]
        return self.uuids.stats

    def generate(self, count: int, prefix: str | None = "", **options: Any) -> TypeIdBatch:
        """Issue ``count`` (1 .. 2**24) TypeIDs with ``prefix`` (None or "" = none); never partial, never waits.

        Raises InvalidOptionError for a prefix breaking the rules, any other option or a bad count;
        OverflowError past the last 48-bit millisecond.
        """
        if options:
            raise InvalidOptionError(f"typeid takes only the option 'type', got {', '.join(sorted(options))}")
        if prefix is None:
            prefix = ""
        if not isinstance(prefix, str):
            raise InvalidOptionError(f"type must be a string, got {type(prefix).__name__}")
        problem = prefix_problem(prefix) if prefix else None
        if problem:
            raise InvalidOptionError(f"type: {problem}")
        try:
            return TypeIdBatch(self.uuids.generate(count), prefix)
        except InvalidOptionError as exc:
            raise InvalidOptionError(str(exc).replace("uuidv7", "typeid")) from None

    def wait_ns(self) -> int:
        return self.uuids.wait_ns()

    @property
    def high_water(self) -> int:
        """The wrapped uuidv7 generator's last millisecond issued (or its floor), in ms."""
        return self.uuids.high_water
