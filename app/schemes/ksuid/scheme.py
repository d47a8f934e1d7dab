"""The ksuid scheme: its settings and :class:`~app.schemes.base.Scheme` (``SCHEME``), over
:mod:`app.schemes.ksuid.codec` and :mod:`app.schemes.ksuid.generator`."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, ClassVar

from app.errors import InvalidOptionError
from app.schemes import time_order as order
from app.schemes.base import (
    Clock,
    Generator,
    LayoutField,
    RandomSource,
    Scheme,
    SchemeSettings,
    csprng,
)
from app.schemes.ksuid.codec import (
    BASE62_LEN,
    EPOCH_S,
    HEX_LEN,
    NANOSECS_IN_SECS,
    PACKED_BITS,
    PACKED_BYTES,
    PAYLOAD_BITS,
    PAYLOAD_BYTES,
    TEXT,
    TIMESTAMP_S_MAX,
    TIMESTAMP_SHIFT,
    decode,
    encode_base62,
    pack,
    unpack,
)
from app.schemes.ksuid.generator import (
    KsuidGenerator,
)

# --- scheme -------------------------------------------------------------------------------------------------------


class KsuidScheme(Scheme):
    """KSUID: metadata, strict parser, base62/hex text, field decoding (docs/schemes/ksuid.md)."""

    name = "ksuid"
    packed_bytes = PACKED_BYTES
    text_forms = TEXT
    rising_formats = {"base62": {}, "hex": {}}
    """Every form rises: the generator is monotonic (+1 per ID after a random payload per second), base62's alphabet is
    in ASCII order and fixed-width."""
    text_width = {"base62": BASE62_LEN, "hex": HEX_LEN}
    timestamp_digits = 3
    native_unit_ns = NANOSECS_IN_SECS
    timestamp_native_max = TIMESTAMP_S_MAX
    layout = (
        LayoutField("timestamp_s", "159..128", "seconds since 1,400,000,000 (2014-05-13T16:53:20Z)"),
        LayoutField("payload", "127..0", "16 random bytes on a new second, then +1 per ID (monotonic)"),
    )
    identity = None
    uniqueness_note = "128 random payload bits per ID; no slice needed"
    reference = "segmentio/ksuid (ksuid.go, base62.go); docs/schemes/ksuid.md"

    # What the service learns from the scheme (app/schemes/base.py).
    title: ClassVar[str] = "KSUID (Segment)"
    example: ClassVar[str] = "0ujtsYcgvSTl8PAuAdqWYSMnLOv"
    captions: ClassVar[dict[str, str]] = {
        "timestamp_s": "Timestamp (Unix seconds)",
        "payload": "Payload (128 bits, hex)",
    }
    token_pattern: ClassVar[str | None] = r"(?<![0-9A-Za-z])(?:[0-9A-Za-z]{27}|[0-9A-Fa-f]{40})(?![0-9A-Za-z])"
    settings_model: ClassVar[Any] = None

    def parse(self, text: str) -> int:
        """base62 (27 characters) or hex (40); InvalidIdError naming the rule broken."""
        return decode(text)

    def fields(self, value: int) -> dict[str, Any]:
        """``{"timestamp_s": int (Unix seconds), "payload": 32 lowercase hex digits}``."""
        timestamp_s, payload = unpack(value)
        return {"timestamp_s": timestamp_s, "payload": f"{payload:0{PAYLOAD_BYTES * 2}x}"}

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """KSUIDs sort by their timestamp (whole seconds since 2014-05-13T16:53:20Z, the top 32 bits) in bytea
        (20 bytes) and text (base62) columns. Takes no options."""
        storages = {order.BYTEA: order.bytea(PACKED_BYTES), order.TEXT: order.text("base62", encode_base62)}
        return order.TimeOrder(
            TIMESTAMP_SHIFT,
            PACKED_BITS,
            EPOCH_S * NANOSECS_IN_SECS,
            Fraction(NANOSECS_IN_SECS),
            TIMESTAMP_S_MAX - EPOCH_S,
            storages,
            note="Coarse: KSUID timestamps are whole seconds, so the bounds hold the IDs of every whole second in "
            "[from, to); an ID made at 12:00:00.7 carries 12:00:00.",
        )

    def timestamp_ns(self, value: int) -> int:
        return unpack(value)[0] * NANOSECS_IN_SECS

    def new_generator(
        self,
        settings: SchemeSettings,
        identities: list[int],
        floor: int,
        clock: Clock,
        random: RandomSource = csprng,
    ) -> KsuidGenerator:
        """A :class:`KsuidGenerator` (``identities`` is empty: no claim); ``floor`` in Unix seconds."""
        return KsuidGenerator(clock=clock, random=random, floor=floor)

    def describe(self, settings: SchemeSettings) -> dict[str, Any]:
        return {"limits": {"timestamp_unit": "1 s", "ids_per_second": f"2**{PAYLOAD_BITS} (then the second advances)"}}

    def node_info(self, settings: SchemeSettings, generator: Generator | None) -> dict[str, Any]:
        return {}

    def registration(self, generator: Generator) -> str | None:
        return None

    def with_decode_options(self, **options: str) -> KsuidScheme:
        """Self; InvalidOptionError for any option (ksuid has no decode options)."""
        if options:
            raise InvalidOptionError(f"ksuid takes no decode options, got {', '.join(sorted(options))}")
        return self

    backfills = True
    timestamp_native_min = EPOCH_S

    def backfill_value(
        self, settings: Any, tick: int, identity: int, sequence: int, random: RandomSource, options: Mapping[str, Any]
    ) -> int:
        """A KSUID at second ``tick`` (Unix s) with a 128-bit payload fresh from ``random``."""
        return pack(tick, int.from_bytes(random(PAYLOAD_BYTES), "big"))


SCHEME = KsuidScheme()
