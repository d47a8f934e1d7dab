"""Crockford base32 for 128-bit values, as ULID (HLC-ULID) and Wiji write them, plus the column-wise batch encoder.

A 128-bit value is written as 26 characters of 5 bits, most significant first, after 2 zero pad bits::

    bit (of the 130-bit string)  129 128 127 ............................................... 0
                                 [pad 0] [             128-bit value, big-endian              ]
    character                    |  0  ||  1  | ... |  9  || 10 | ... | 25 |
    character c covers bits      (129 - 5c) .. (125 - 5c)

    characters 0..9   = bits 129..80  = 2 pad bits + value bytes 0..5  (top 48 bits)
    characters 10..25 = bits  79..0   = value bytes 6..15              (low 80 bits)

Alphabet ``0123456789ABCDEFGHJKMNPQRSTVWXYZ`` (no I, L, O, U), written uppercase. Parsing is case-insensitive and
reads O as 0, I and L as 1; Wiji also reads U as V. The two schemes differ in how the first character is bounded
(:data:`ULID`: 0..7, the 128-bit overflow rule; :data:`WIJI`: 0 or 1), so decoding takes a :class:`Dialect`.

The batch side (:func:`column_table`, :func:`text_rows`, :func:`char_view`, :func:`hex4_table`) builds the text of
many IDs at once in an ``(n, width + 1)`` uint8 array: rows start as copies of one template row (the constant
characters of a batch), and the characters that vary are overwritten column-wise with one little-endian ``<u4``
write per group of up to 4 characters, looked up in per-16-bit-value tables built once, lazily.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from app.errors import InvalidIdError
from app.schemes._text import NEWLINE, TABLE_ENTRY_CHARS, TABLE_INDEX_BITS

# --- layout of the text ---------------------------------------------------------------------------------------------

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ENCODED_LEN = 26
"""Characters in the text of a 128-bit value."""
CHAR_BITS = 5
CHAR_MASK = (1 << CHAR_BITS) - 1
VALUE_BITS = 128
VALUE_MAX = (1 << VALUE_BITS) - 1
PAD_BITS = ENCODED_LEN * CHAR_BITS - VALUE_BITS  # 2 zero bits on top
TOP_CHARS = 10
"""Characters 0..9 encode exactly the top 48 bits (bytes 0..5); 10..25 exactly the low 80 (bytes 6..15)."""


PAIR_BITS = 2 * CHAR_BITS
PAIR_MASK = (1 << PAIR_BITS) - 1
_PAIRS = [ALPHABET[i >> CHAR_BITS] + ALPHABET[i & CHAR_MASK] for i in range(1 << PAIR_BITS)]
"""The two characters of every 10-bit value: the scalar encoder does 13 lookups instead of 26."""
_WORD_BITS = 3 * PAIR_BITS
"""Before its pairs are looked up, the value is cut into a 38-bit top (bits 127..90) and three 30-bit words (one
CPython digit each), so 12 of the 13 lookups shift and mask small ints."""
_WORD_MASK = (1 << _WORD_BITS) - 1
_TWO_PAIRS = 2 * PAIR_BITS
_ALPHABET_ASCII = np.frombuffer(ALPHABET.encode("ascii"), dtype=np.uint8)


def char_shift(position: int) -> int:
    """Bit index (within the 128-bit value) of the lowest bit that character ``position`` (0..25) encodes."""
    return (ENCODED_LEN - 1 - position) * CHAR_BITS


# --- single values (slow path) ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    """How one scheme reads Crockford base32: its name in messages, its substitutions and first-character bound.

    ``first_char_max`` is the largest digit the first character may hold (7: every 128-bit value; 1: the top two
    bits of the value are zero as well). ``first_char_rule`` is the message stating that rule.
    """

    label: str
    substitutions: tuple[tuple[str, str], ...]
    first_char_max: int
    first_char_rule: str
    lowercase_only: bool = False
    """True: only the lowercase alphabet is read (TypeID); False: any case."""
    _digits: dict[int, str] = field(init=False, repr=False, compare=False)
    _accepted: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Map every accepted character to its digit in Python's int(..., 32) alphabet (0-9 a-v).
        python_digits = "0123456789abcdefghijklmnopqrstuv"
        digits: dict[int, str] = {}
        for value, char in enumerate(ALPHABET):
            for variant in (char.lower(),) if self.lowercase_only else (char, char.lower()):
                digits[ord(variant)] = python_digits[value]
        for alias, target in self.substitutions:
            for variant in (alias, alias.lower()):
                digits[ord(variant)] = python_digits[ALPHABET.index(target)]
        object.__setattr__(self, "_digits", digits)
        object.__setattr__(self, "_accepted", frozenset(chr(code) for code in digits))

    @property
    def alphabet_rule(self) -> str:
        if self.lowercase_only:
            return f"the lowercase base32 alphabet {ALPHABET.lower()} (no uppercase, no substitutions)"
        readings = ", ".join(f"{alias} reads {target}" for alias, target in self.substitutions)
        if not readings:
            return f"the Crockford base32 alphabet {ALPHABET} (any case; no I, L, O or U)"
        return f"the Crockford base32 alphabet 0-9 A-H J K M N P-T V-Z (any case; {readings})"


ULID = Dialect(
    label="ULID",
    substitutions=(("O", "0"), ("I", "1"), ("L", "1")),
    first_char_max=7,
    first_char_rule="ULID overflow: the first character must be 0..7 (26 characters carry 130 bits, a ULID 128)",
)
"""ULID rules: case-insensitive, O->0, I/L->1, first character 0..7 (python-ulid / ulid spec)."""

WIJI = Dialect(
    label="Wiji base32",
    substitutions=(("O", "0"), ("I", "1"), ("L", "1"), ("U", "V")),
    first_char_max=1,
    first_char_rule=(
        "Wiji base32 must start with 0 or 1 (2 zero bits are prepended and the timestamp's top 2 bits are zero)"
    ),
)
"""Wiji v1 rules (WIJI_SPEC section 5.1/8): case-insensitive, O->0, I/L->1, U->V, first character 0 or 1."""

STRICT_ULID = Dialect(
    label="ULID",
    substitutions=(),
    first_char_max=7,
    first_char_rule="ULID overflow: the first character must be 0..7 (26 characters carry 130 bits, a ULID 128)",
)
"""The ulid scheme's rules, as python-ulid reads ULIDs: any case, the 32 alphabet characters only, first 0..7."""

TYPEID = Dialect(
    label="TypeID suffix",
    substitutions=(),
    first_char_max=7,
    first_char_rule=(
        "TypeID suffix overflow: the first character must be 0..7 (26 characters carry 130 bits, a UUID 128)"
    ),
    lowercase_only=True,
)
"""TypeID spec v0.3 rules: lowercase only, no substitutions, first character 0..7."""


def encode(value: int) -> str:
    """The 26 uppercase Crockford characters of a 128-bit value (2 zero bits prepended).

    Raises ValueError unless ``0 <= value < 2**128``. Inverse of :func:`decode`.
    """
    if not 0 <= value <= VALUE_MAX:
        raise ValueError(f"a 128-bit value must be in 0..2**{VALUE_BITS}-1, got {value}")
    # Four shifts of the 128-bit value: a 38-bit top (bits 127..90: the first pair, then three) and three 30-bit
    # words (89..60, 59..30, 29..0), then 13 pair lookups joined by one f-string: shifts of small ints, not 13 of
    # the whole value and a join (figures: docs/serving.md, "Figures behind choices in the code").
    a, b = value >> 3 * _WORD_BITS, value >> 2 * _WORD_BITS & _WORD_MASK
    c, d = value >> _WORD_BITS & _WORD_MASK, value & _WORD_MASK
    p = _PAIRS
    return (
        f"{p[a >> _WORD_BITS]}{p[a >> _TWO_PAIRS & PAIR_MASK]}{p[a >> PAIR_BITS & PAIR_MASK]}{p[a & PAIR_MASK]}"
        f"{p[b >> _TWO_PAIRS]}{p[b >> PAIR_BITS & PAIR_MASK]}{p[b & PAIR_MASK]}"
        f"{p[c >> _TWO_PAIRS]}{p[c >> PAIR_BITS & PAIR_MASK]}{p[c & PAIR_MASK]}"
        f"{p[d >> _TWO_PAIRS]}{p[d >> PAIR_BITS & PAIR_MASK]}{p[d & PAIR_MASK]}"
    )


def decode(text: str, dialect: Dialect) -> int:
    """The 128-bit value of 26 Crockford characters read with ``dialect``'s rules.

    Raises :class:`~app.errors.InvalidIdError` naming the rule broken: length, alphabet (with the position of the
    first bad character), or the dialect's first-character bound. Inverse of :func:`encode`.
    """
    if len(text) != ENCODED_LEN:
        raise InvalidIdError(f"{dialect.label} must be exactly {ENCODED_LEN} characters long, got {len(text)}")
    if not dialect._accepted.issuperset(text):
        position, char = next((i, c) for i, c in enumerate(text) if c not in dialect._accepted)
        raise InvalidIdError(f"{dialect.label} must use {dialect.alphabet_rule}, got {char!r} at position {position}")
    digits = text.translate(dialect._digits)
    if int(digits[0], 32) > dialect.first_char_max:
        raise InvalidIdError(f"{dialect.first_char_rule}, got {text[0]!r}")
    return int(digits, 32)


def column_table(
    base: int, shift: int, first: int, chars: int, pad: int = NEWLINE, index_bits: int = TABLE_INDEX_BITS
) -> npt.NDArray[np.uint32]:
    """Characters ``first .. first + chars - 1`` of ``encode(base | v << shift)`` for every ``index_bits``-bit ``v``.

    Shape ``(2**index_bits,)`` (65536 by default), dtype ``<u4``: byte j of entry v is the ASCII of character
    ``first + j``; bytes ``chars..3`` hold ``pad`` (``chars`` in 1..4). One ``<u4`` write at column ``first`` (see
    :func:`char_view`) therefore lays the characters down in order. ``base`` supplies the constant bits those
    characters also cover (only the bits inside the characters' window matter) and must be zero where ``v << shift``
    lands; bits of ``v`` outside the window are ignored. Tables are built once and cached.
    """
    if not 1 <= chars <= TABLE_ENTRY_CHARS or not 0 <= first <= ENCODED_LEN - chars:
        raise ValueError(f"characters {first}..{first + chars - 1} are not 1..4 of the 26 characters")
    low = char_shift(first + chars - 1)
    high = char_shift(first) + CHAR_BITS
    window = base & ((1 << high) - (1 << low))
    return _column_table(window, shift, first, chars, pad, index_bits)


@functools.lru_cache(maxsize=64)
def _column_table(window: int, shift: int, first: int, chars: int, pad: int, index_bits: int) -> npt.NDArray[np.uint32]:
    rows = 1 << index_bits
    values = np.arange(rows, dtype=np.uint64)
    table = np.full((rows, TABLE_ENTRY_CHARS), pad, dtype=np.uint8)
    for j in range(chars):
        low = char_shift(first + j)
        digit = np.full(rows, (window >> low) & CHAR_MASK, dtype=np.uint64)
        if low <= shift < low + CHAR_BITS:  # v's low bits land inside this character
            digit |= (values << np.uint64(shift - low)) & np.uint64(CHAR_MASK)
        elif shift < low < shift + index_bits:  # v's higher bits land inside this character
            digit |= (values >> np.uint64(low - shift)) & np.uint64(CHAR_MASK)
        table[:, j] = _ALPHABET_ASCII[digit]
    table.flags.writeable = False
    return table.view("<u4").reshape(rows)
