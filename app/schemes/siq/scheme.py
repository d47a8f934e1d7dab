"""The siq scheme: its settings and :class:`~app.schemes.base.Scheme` (``SCHEME``), over
:mod:`app.schemes.siq.codec` and :mod:`app.schemes.siq.generator`."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from pydantic import Field

from app.errors import InvalidIdError
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
from app.schemes.pool import IdentityPool
from app.schemes.siq.codec import (
    _DECIMAL_RE,
    _QUALIFIER_BY_CODE,
    DID_BODY_LEN,
    DID_LEN,
    DID_PREFIX,
    DID_PREFIX_LEN,
    FRACTION_BITS,
    FRACTION_MASK,
    HEX_LEN,
    NANOSECS_IN_SECS,
    NANOSECS_PER_TICK,
    PACKED_BITS,
    PACKED_BYTES,
    QUALIFIERS,
    SHARD_MAX,
    STORAGE_BYTES,
    TEXT,
    TICK_MAX,
    TICK_SHIFT,
    UNASSIGNED,
    decode_decimal,
    decode_did,
    decode_hex,
    domain_hash,
    encode_hex,
    tick_from_ns,
    unpack,
)
from app.schemes.siq.generator import (
    SiqGenerator,
)

# --- scheme -------------------------------------------------------------------------------------------------------


class SiqSettings(SchemeSettings):
    """SIQ settings (joined into :class:`app.settings.Settings`; env ``IDMINT_SIQ_*``)."""

    siq_shard: int | None = Field(None, ge=0, le=SHARD_MAX, description="Static SIQ shard (0..255); unset = claim one.")
    siq_domain: str = Field("", description="SIQ domain whose hash goes into every SIQ ('' = hash 0).")


QUALIFIER_WORDS = {
    "content": "a piece of content",
    "multi": "a multi-type object",
    "manytomany": "a many-to-many link",
    "ternary": "a ternary relation",
    "thread": "a thread",
    "message": "a message",
    "user": "a user",
    "tag": "a tag",
    "group": "a group",
    "event": "an event",
    "channel": "a channel",
    "invite": "an invite",
    "application": "an application",
    "collection": "a collection",
    "premium": "a premium item",
    UNASSIGNED: "a code no type has been given yet",
}
"""What each qualifier names, in words (the decode page)."""


class SiqScheme(Scheme):
    """SIQ: metadata, strict parser, did/hex/decimal text, field decoding (docs/schemes/siq.md)."""

    name = "siq"
    packed_bytes = PACKED_BYTES
    text_forms = TEXT
    rising_formats = {"hex": {}}
    # The qualifier field's 5 bits name one type (the suffix code is a prefix code; a 3- or 4-bit suffix leaves
    # low counter bits in them), and one type's (tick, counter) pairs strictly rise: so do the IDs of each
    # (shard, domain hash, qualifier bits). Types of one shard share ticks, so a shard alone does not rise.
    identity_fields = ("shard", "domain_hash", "qualifier")
    identity_rising_formats = {"hex": {}, "decimal": {}}
    """Only hex rises: ``did`` starts with a CRC-32 of the ID, so its text does not sort like the IDs; ``decimal`` has
    no fixed width."""
    text_width = {"did": DID_LEN, "hex": HEX_LEN}
    timestamp_digits = 6
    native_unit_ns = NANOSECS_PER_TICK
    timestamp_native_max = TICK_MAX
    layout = (
        LayoutField("seconds", "111..72", "whole seconds since the Unix epoch"),
        LayoutField("fraction", "71..56", "binary fraction of the second, in 1/65536 s (~15.26 µs)"),
        LayoutField("shard", "55..48", "node identity, 0..255"),
        LayoutField("domain_hash", "47..16", "last 4 bytes of SHA-256(domain), big-endian; '' or '0' -> 0"),
        LayoutField(
            "serial",
            "15..5",
            "per-qualifier counter: 11 bits for 5-bit qualifiers; reaches down to bit 4 (12 bits) for thread and "
            "message, bit 3 (13 bits) for content, multi, manytomany and ternary",
        ),
        LayoutField(
            "qualifier",
            "4..0",
            "type suffix, 3, 4 or 5 bits: bit 0 = 1 -> 3 bits; low bits 110 -> 4 bits; otherwise 5 bits",
        ),
    )
    uniqueness = "identity"
    uniqueness_note = "a shard (0..255) leased within the domain; regions slice the shards"
    reference = "SIQ (yusurko/suou src/suou/iding.py, https://yusur.moe/protocols/siq.html); docs/schemes/siq.md"

    def parse(self, text: str) -> int:
        """did form (``did:siq:`` + 29 base32), 28 hex digits, or decimal; a 28-digit string is the hex form."""
        if text[:DID_PREFIX_LEN].isascii() and text[:DID_PREFIX_LEN].lower() == DID_PREFIX:
            return decode_did(text)
        if len(text) == HEX_LEN:
            return decode_hex(text)
        if text and text.isascii() and _DECIMAL_RE.fullmatch(text) is not None:
            return decode_decimal(text)
        raise InvalidIdError(
            f"SIQ must be {DID_PREFIX!r} + {DID_BODY_LEN} base32 characters, {HEX_LEN} hex digits, or a decimal "
            f"number below 2**{PACKED_BITS}; got {len(text)} characters that are none of these"
        )

    def fields(self, value: int) -> dict[str, Any]:
        """``{"seconds", "fraction", "shard", "domain_hash", "serial", "qualifier"}``: ints, and the qualifier's
        name (or ``"unassigned"``); ``serial`` is the counter without the suffix."""
        parts = unpack(value)
        return {
            "seconds": parts.tick >> FRACTION_BITS,
            "fraction": parts.tick & FRACTION_MASK,
            "shard": parts.shard,
            "domain_hash": parts.domain_hash,
            "serial": parts.counter,
            "qualifier": _QUALIFIER_BY_CODE.get(parts.code, UNASSIGNED),
        }

    def time_order(self, options: Mapping[str, str]) -> order.TimeOrder:
        """SIQs sort by their tick (1/65536 s, the top 56 bits) in bytea (the 16-byte storage form) and text (28
        hex digits) columns; the did:siq form starts with a checksum and does not sort. Takes no options."""
        storages = {order.BYTEA: order.bytea(STORAGE_BYTES), order.TEXT: order.text("hex", encode_hex)}
        return order.TimeOrder(
            TICK_SHIFT, PACKED_BITS, 0, Fraction(NANOSECS_IN_SECS, 1 << FRACTION_BITS), TICK_MAX, storages
        )

    def timestamp_ns(self, value: int) -> int | None:
        """floor(tick * 1e9 / 65536) ns since the epoch."""
        return (unpack(value).tick * NANOSECS_IN_SECS) >> FRACTION_BITS

    def native_from_ns(self, ns: int) -> int:
        """Exact integer floor(ns * 65536 / 1e9) (the base class's float division can be off by one tick)."""
        return tick_from_ns(ns)

    title = "SIQ"
    example = "did:siq:gm24tg4ago5efqaaaab4gzymuoaaa"
    token_pattern = r"did:siq:[A-Za-z0-9]+"
    settings_model = SiqSettings
    options = (
        SchemeOption(
            "type",
            "qualifier",
            "The qualifier: what kind of object the IDs name (default user).",
            choices=tuple(QUALIFIERS),
        ),
    )
    captions = {
        "seconds": "Whole seconds since 1970-01-01 UTC (40 bits).",
        "fraction": "Binary fraction of the second (16 bits): the tick is 1/65536 s.",
        "shard": "Shard (0..255) of the node that made it, leased so no two nodes share one.",
        "domain_hash": "Last 4 bytes of SHA-256 of the issuing domain name; 0 means no domain was set.",
        "serial": "Counter per qualifier within one tick of 1/65536 s.",
        "qualifier": "What kind of object the ID names: the low 3 to 5 bits.",
    }

    def identity_pool(self, settings: SiqSettings) -> IdentityPool:
        """The region's slice of shards 0..255 per domain: ``idmint/siq/<domain hash, 8 hex>/<shard>``."""
        return idmint_pool(
            self.name,
            "shard",
            (0, SHARD_MAX),
            settings,
            group=f"{domain_hash(settings.siq_domain):08x}",
            group_in_id=True,
            static=settings.siq_shard,
            static_setting="IDMINT_SIQ_SHARD",
        )

    def new_generator(
        self, settings: SiqSettings, identities: list[int], floor: int, clock: Clock, random: RandomSource = csprng
    ) -> Generator:
        return SiqGenerator(identities[0], settings.siq_domain, clock=clock, floor=floor)

    def node_info(self, settings: SiqSettings, generator: Generator | None) -> dict[str, Any]:
        return {"domain": settings.siq_domain, "domain_hash": domain_hash(settings.siq_domain)}

    def words(self, fields: dict[str, Any]) -> dict[str, str]:
        qualifier, fraction, dhash = fields["qualifier"], fields["fraction"], fields["domain_hash"]
        return {
            "seconds": f"{grouped(fields['seconds'])} s since the Unix epoch",
            "fraction": f"{fraction}/65536 s ≈ {fraction / 65.536:.3f} ms",
            "shard": f"shard {fields['shard']}",
            "domain_hash": "no domain (hash 0)" if dhash == 0 else f"domain hash {hex_word(dhash, 8)}",
            "serial": f'serial {fields["serial"]} among "{qualifier}" IDs of its tick',
            "qualifier": f'qualifier "{qualifier}": '
            + QUALIFIER_WORDS.get(str(qualifier).lower(), "a type this page has no words for"),
        }

    def summary(self, fields: dict[str, Any]) -> str:
        return (
            f"{fields['qualifier']} #{fields['serial']} on shard {fields['shard']}, {self.words(fields)['domain_hash']}"
        )


SCHEME = SiqScheme()
