"""Packed integers of named fields: the one helper behind every scheme's range check, pack/unpack, bytes and hex.

A scheme's codec declares its layout once, most significant field first, each field a name and a width in bits::

    PACKED = PackedInt("HLC-ULID", [("timestamp_ms", 48), ("counter", 16), ("publisher_id", 16), ("random", 48)],
                       article="an")

    PACKED.pack(1, 2, 3, 4)   # fields in order -> int; ValueError "HLC-ULID counter must be in 0..65535, got -1"
    PACKED.unpack(value)      # -> (timestamp_ms, counter, publisher_id, random); ValueError out of 0..2**128-1
    PACKED.to_bytes(value)    # 16 big-endian bytes;  PACKED.from_bytes(data) the inverse
    PACKED.hex(value)         # 32 lowercase hex digits

A field may carry a fixed value (a version nibble, variant bits): :meth:`PackedInt.pack` sets it and
:meth:`PackedInt.unpack` leaves it out. A field may cap its range below its width (Wiji's timestamp is 56 bits of
which 54 are valid). A scheme whose values obey more than the width (a version nibble) passes ``problem``: a
function naming the rule a value breaks, or None; :meth:`PackedInt.check` and :meth:`PackedInt.from_bytes` then
refuse such values too. Errors are ValueError stating the rule, worded as the schemes always worded them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

BYTE_BITS = 8
HEX_DIGIT_BITS = 4


@dataclass(frozen=True)
class PackedField:
    """One field: ``bits`` wide at ``shift`` (bit 0 = least significant); ``max`` is its largest value (the width's
    unless capped); ``fixed`` a value :meth:`PackedInt.pack` always sets (None: the caller gives it)."""

    name: str
    bits: int
    shift: int
    max: int
    fixed: int | None = None

    @property
    def mask(self) -> int:
        """All ones over the field's width (not shifted)."""
        return (1 << self.bits) - 1


FieldSpec = tuple[str, int] | tuple[str, int, int | None] | tuple[str, int, int | None, int | None]
"""``(name, bits)``, ``(name, bits, max)`` or ``(name, bits, max, fixed)``; ``max`` None = the width's."""


class PackedInt:
    """A big-endian packed integer made of named fields (see the module docstring).

    ``noun`` names the ID in messages ("HLC-ULID": "a packed HLC-ULID must be in 0..2**128-1, got -1", "HLC-ULID
    counter must be in 0..65535, got -1"); ``article`` precedes it in the length rule ("an HLC-ULID has to be
    exactly 16 bytes long, got 15"; "" for none), or ``bytes_noun`` replaces both there. ``bits`` is the packed
    width, when the fields do not fill it.
    """

    __slots__ = ("noun", "bytes_noun", "fields", "variable", "bits", "bytes", "max", "hex_len", "problem", "_unpack")

    def __init__(
        self,
        noun: str,
        fields: Sequence[FieldSpec],
        *,
        article: str = "a",
        bytes_noun: str | None = None,
        bits: int | None = None,
        problem: Callable[[int], str | None] | None = None,
    ) -> None:
        total = sum(spec[1] for spec in fields)
        self.bits = total if bits is None else bits
        if self.bits < total or self.bits % BYTE_BITS:
            raise ValueError(f"a packed integer must be a whole number of bytes holding its fields, got {self.bits}")
        self.noun = noun
        self.bytes_noun = bytes_noun if bytes_noun is not None else f"{article} {noun}".strip()
        shift = total
        built: list[PackedField] = []
        for spec in fields:
            name, width = spec[0], spec[1]
            cap = spec[2] if len(spec) > 2 else None
            fixed = spec[3] if len(spec) > 3 else None
            shift -= width
            built.append(PackedField(name, width, shift, (1 << width) - 1 if cap is None else cap, fixed))
        self.fields = tuple(built)
        self.variable = tuple(f for f in built if f.fixed is None)
        self.bytes = self.bits // BYTE_BITS
        self.max = (1 << self.bits) - 1
        self.hex_len = self.bits // HEX_DIGIT_BITS
        self.problem = problem
        self._unpack = tuple((f.shift, f.mask) for f in self.variable)

    def field(self, name: str) -> PackedField:
        """The field called ``name`` (KeyError naming it otherwise)."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.noun} has no field {name!r}")

    def span(self, name: str) -> str:
        """Field ``name``'s bits as :class:`~app.schemes.base.LayoutField` writes them: ``"79..64"``."""
        f = self.field(name)
        return f"{f.shift + f.bits - 1}..{f.shift}"

    def check(self, value: int) -> None:
        """ValueError unless ``0 <= value <= 2**bits - 1`` (and ``problem`` finds nothing)."""
        if not 0 <= value <= self.max:
            raise ValueError(f"a packed {self.noun} must be in 0..2**{self.bits}-1, got {value}")
        if self.problem is not None:
            problem = self.problem(value)
            if problem:
                raise ValueError(problem)

    def pack(self, *values: int) -> int:
        """The packed integer of the non-fixed fields' ``values``, in field order; fixed fields get their value.
        ValueError naming the first field out of its range. Inverse of :meth:`unpack`."""
        if len(values) != len(self.variable):
            raise TypeError(f"{self.noun} packs {len(self.variable)} fields, got {len(values)}")
        packed = 0
        given = iter(values)
        for f in self.fields:
            value = f.fixed if f.fixed is not None else next(given)
            if not 0 <= value <= f.max:
                raise ValueError(f"{self.noun} {f.name} must be in 0..{f.max}, got {value}")
            packed |= value << f.shift
        return packed

    def unpack(self, value: int) -> tuple[int, ...]:
        """The non-fixed fields of a packed integer, in field order; ValueError as :meth:`check`."""
        self.check(value)
        return tuple([(value >> shift) & mask for shift, mask in self._unpack])

    def to_bytes(self, value: int) -> bytes:
        """The big-endian bytes of a packed integer; ValueError as :meth:`check`."""
        self.check(value)
        return value.to_bytes(self.bytes, "big")

    def from_bytes(self, data: bytes) -> int:
        """The packed integer in ``data`` (exactly :attr:`bytes` big-endian bytes); ValueError for another length
        (or a value ``problem`` refuses). Inverse of :meth:`to_bytes`."""
        if len(data) != self.bytes:
            raise ValueError(f"{self.bytes_noun} has to be exactly {self.bytes} bytes long, got {len(data)}")
        value = int.from_bytes(data, "big")
        if self.problem is not None:
            self.check(value)
        return value

    def hex(self, value: int) -> str:
        """The packed integer as :attr:`hex_len` lowercase hex digits; ValueError as :meth:`check`."""
        self.check(value)
        return f"{value:0{self.hex_len}x}"
