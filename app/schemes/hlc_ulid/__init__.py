"""The hlc-ulid scheme. Its modules import one way: :mod:`~app.schemes.hlc_ulid.codec` (layout, pack/unpack, text
forms; the layout is drawn there), then :mod:`~app.schemes.hlc_ulid.generator` (batches and the generator), then
:mod:`~app.schemes.hlc_ulid.scheme` (settings and ``SCHEME``). The names callers use are re-exported here."""

from __future__ import annotations

from app.schemes.hlc_ulid.codec import (
    BATCH_COUNT_MAX,
    COUNTER_MAX,
    COUNTER_SLOTS,
    PACKED_MAX,
    PUBLISHER_ID_MAX,
    RANDOM_MAX,
    TEXT,
    TIMESTAMP_MS_MAX,
    decode_hex,
    decode_ulid,
    encode_hex,
    encode_ulid,
    from_bytes,
    pack,
    to_bytes,
    unpack,
)
from app.schemes.hlc_ulid.generator import (
    HlcUlidBatch,
    HlcUlidGenerator,
    random_field,
)
from app.schemes.hlc_ulid.scheme import (
    SCHEME,
    HlcUlidScheme,
    HlcUlidSettings,
)

__all__ = [
    "BATCH_COUNT_MAX",
    "COUNTER_MAX",
    "COUNTER_SLOTS",
    "HlcUlidBatch",
    "HlcUlidGenerator",
    "HlcUlidScheme",
    "HlcUlidSettings",
    "PACKED_MAX",
    "PUBLISHER_ID_MAX",
    "RANDOM_MAX",
    "SCHEME",
    "TEXT",
    "TIMESTAMP_MS_MAX",
    "decode_hex",
    "decode_ulid",
    "encode_hex",
    "encode_ulid",
    "from_bytes",
    "pack",
    "random_field",
    "to_bytes",
    "unpack",
]
