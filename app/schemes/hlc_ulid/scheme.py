"""The hlc-ulid scheme: its settings and :class:`~app.schemes.base.Scheme` (``SCHEME``), over
:mod:`app.schemes.hlc_ulid.codec` and :mod:`app.schemes.hlc_ulid.generator`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from app.errors import InvalidIdError, InvalidOptionError
from app.schemes import time_order as order
from app.schemes.base import (
    Clock,
    Generator,
    LayoutField,
    RandomSource,
    Scheme,
    SchemeOption,
    SchemeSettings,
    csprng,
    grouped,
    hex_word,
    idmint_pool,
)
from app.schemes.hlc_ulid.codec import (
    HEX_LEN,
    MAX_DRIFT_MS_DEFAULT,
    NANOSECS_IN_MILLISECS,
    PACKED_BYTES,
    PUBLISHER_ID_HEX_LEN,
    PUBLISHER_ID_MAX,
    RANDOM_HEX_LEN,
    TEXT,
    TIMESTAMP_MS_MAX,
    TIMESTAMP_SHIFT,
    ULID_LEN,
    decode_hex,
    decode_ulid,
    encode_ulid,
    unpack,
)
from app.schemes.hlc_ulid.generator import (
    HlcUlidGenerator,
)
from app.schemes.pool import IdentityPool

# --- scheme -------------------------------------------------------------------------------------------------------


class HlcUlidSettings(SchemeSettings):
    """HLC-ULID settings (joined into :class:`app.settings.Settings`; env ``IDMINT_HLC_ULID_*``)."""

    hlc_ulid_publisher_id: int | None = Field(
        None, ge=0, le=PUBLISHER_ID_MAX, description="Static HLC-ULID publisher ID (0..65535); unset = claim one."
    )
    hlc_ulid_max_drift_ms: int = Field(
        MAX_DRIFT_MS_DEFAULT,
        ge=0,
        description="HLC-ULID: refuse `after` IDs more than this many ms ahead of our clock.",
    )


class HlcUlidScheme(Scheme):
    """HLC-ULID: metadata, strict parser, text forms, field decoding (docs/schemes/hlc-ulid.md)."""

    name = "hlc-ulid"
    packed_bytes = PACKED_BYTES
    text_forms = TEXT
    rising_formats = {"ulid": {}, "hex": {}}
    identity_fields = ("publisher_id",)
    identity_rising_formats = {"ulid": {}, "hex": {}}
    """Every form rises: the hybrid logical clock never steps back; packed order is the order of both fixed-width
    forms."""
    text_width = {"ulid": ULID_LEN, "hex": HEX_LEN}
    timestamp_digits = 3
    native_unit_ns = NANOSECS_IN_MILLISECS
    timestamp_native_max = TIMESTAMP_MS_MAX
    layout = (
        LayoutField("timestamp_ms", "127..80", "milliseconds since the Unix epoch (the ULID timestamp)"),
        LayoutField("counter", "79..64", "HLC logical counter within the logical millisecond"),
        LayoutField("publisher_id", "63..48", "node identity (leased)"),
        LayoutField("random", "47..0", "tie-breaker: 48 fresh bits from a CSPRNG per ID"),
    )
    uniqueness = "identity"
    uniqueness_note = "a publisher ID (0..65535) leased per node, plus random bits; regions slice the publisher IDs"
    reference = "HLC-ULID document and HlcUlid.scala (ajzawawi/flink-amps-source); docs/schemes/hlc-ulid.md"

    def parse(self, text: str) -> int:
        """ULID (26 characters) or hyphenated hex (35); InvalidIdError naming the rule broken."""
        if len(text) == ULID_LEN:
            return decode_ulid(text)
        if len(text) == HEX_LEN:
            return decode_hex(text)
        raise InvalidIdError(
            f"HLC-ULID must be {ULID_LEN} (ULID) or {HEX_LEN} (12-4-4-12 hex) characters long, got {len(text)}"
        )

    def fields(self, value: int) -> dict[str, Any]:
        """``{"timestamp_ms", "counter", "publisher_id", "random"}`` as ints."""
        timestamp_ms, counter, publisher_id, random = unpack(value)
        return {"timestamp_ms": timestamp_ms, "counter": counter, "publisher_id": publisher_id, "random": random}

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """HLC-ULIDs sort by their HLC ms timestamp (the top 48 bits) in uuid, bytea (16 bytes) and text (canonical
        ULID string) columns. Takes no options."""
        return order.sixteen_bytes(
            TIMESTAMP_SHIFT,
            NANOSECS_IN_MILLISECS,
            TIMESTAMP_MS_MAX,
            "ulid",
            encode_ulid,
            note="The timestamp is the hybrid logical clock's: it can run ahead of the wall clock after merging a "
            "later ID (after=) or under bursts of more than 65,536 IDs in one millisecond.",
        )

    def timestamp_ns(self, value: int) -> int:
        """The physical/logical millisecond as ns since the epoch."""
        return unpack(value)[0] * NANOSECS_IN_MILLISECS

    title = "HLC-ULID"
    example = "01FZ11RQKT000002NAM48H248H"
    # the hex form, and ~26 mixed base32 characters (a ULID-shaped token, also near misses)
    token_pattern = (
        r"[0-9A-Fa-f]{11,13}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{11,13}"
        r"|(?=[0-9A-Za-z]*[0-9])(?=[0-9A-Za-z]*[A-Za-z])[0-9A-Za-z]{24,28}"
    )
    settings_model = HlcUlidSettings
    options = (
        SchemeOption(
            "after",
            "after",
            "An HLC-ULID (any accepted form): every returned ID sorts after it (the HLC "
            "receive rule merges its time into this node's clock).",
        ),
    )
    captions = {
        "timestamp_ms": "Hybrid logical clock time: milliseconds since 1970-01-01 UTC (48 bits).",
        "counter": "Logical counter of the hybrid logical clock (16 bits).",
        "publisher_id": "Publisher ID (16 bits) of the node that made it, leased so no two nodes share one.",
        "random": "Tie-breaker drawn fresh from a CSPRNG for every ID (48 bits); it carries no meaning.",
    }

    def parse_option(self, name: str, text: str) -> Any:
        """``after``: the packed HLC-ULID. Raises InvalidOptionError for another option or an unparsable ID."""
        if name != "after":
            return super().parse_option(name, text)
        try:
            return self.parse(text.strip())
        except InvalidIdError as exc:
            raise InvalidOptionError(f"after must be an HLC-ULID: {exc}") from exc

    def identity_pool(self, settings: HlcUlidSettings) -> IdentityPool:
        """The region's slice of publisher IDs 0..65535, at ``idmint/hlc-ulid/<n>``."""
        return idmint_pool(
            self.name,
            "publisher_id",
            (0, PUBLISHER_ID_MAX),
            settings,
            static=settings.hlc_ulid_publisher_id,
            static_setting="IDMINT_HLC_ULID_PUBLISHER_ID",
        )

    def new_generator(
        self,
        settings: HlcUlidSettings,
        identities: list[int],
        floor: int,
        clock: Clock,
        random: RandomSource = csprng,
    ) -> Generator:
        return HlcUlidGenerator(
            identities[0], clock=clock, rng=random, floor=floor, max_drift_ms=settings.hlc_ulid_max_drift_ms
        )

    def words(self, fields: dict[str, Any]) -> dict[str, str]:
        counter = fields["counter"]
        before = "1 ID" if counter == 1 else f"{grouped(counter)} IDs"
        return {
            "timestamp_ms": f"{grouped(fields['timestamp_ms'])} ms since the Unix epoch",
            "counter": (
                "counter 0: first ID of its logical millisecond"
                if counter == 0
                else f"counter {counter}: {before} before it in the same logical millisecond"
            ),
            "publisher_id": f"publisher {hex_word(fields['publisher_id'], PUBLISHER_ID_HEX_LEN)}",
            "random": f"random {hex_word(fields['random'], RANDOM_HEX_LEN)}",
        }

    def summary(self, fields: dict[str, Any]) -> str:
        return f"{self.words(fields)['publisher_id']}, counter {fields['counter']}"


SCHEME = HlcUlidScheme()
