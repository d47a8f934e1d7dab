"""The snowflake scheme. Its modules import one way: :mod:`~app.schemes.snowflake.codec` (layout, pack/unpack, text
forms; the layout is drawn there), then :mod:`~app.schemes.snowflake.generator` (batches and the generator), then
:mod:`~app.schemes.snowflake.scheme` (settings and ``SCHEME``). The names callers use are re-exported here."""

from __future__ import annotations

from app.schemes.snowflake.codec import (
    DISCORD,
    INSTAGRAM,
    JS53,
    NAMED_LAYOUTS,
    PACKED_MAX,
    SONYFLAKE,
    TEXT,
    TIMESTAMP_MS_LIMIT,
    TWITTER,
    Layout,
    check_layout,
    decode,
    decode_decimal,
    decode_hex,
    encode_decimal,
    encode_hex,
)
from app.schemes.snowflake.generator import (
    SnowflakeBatch,
    SnowflakeGenerator,
)
from app.schemes.snowflake.scheme import (
    SCHEME,
    SnowflakeScheme,
    SnowflakeSettings,
)

__all__ = [
    "DISCORD",
    "INSTAGRAM",
    "JS53",
    "Layout",
    "NAMED_LAYOUTS",
    "PACKED_MAX",
    "SCHEME",
    "SONYFLAKE",
    "SnowflakeBatch",
    "SnowflakeGenerator",
    "SnowflakeScheme",
    "SnowflakeSettings",
    "TEXT",
    "TIMESTAMP_MS_LIMIT",
    "TWITTER",
    "check_layout",
    "decode",
    "decode_decimal",
    "decode_hex",
    "encode_decimal",
    "encode_hex",
]
