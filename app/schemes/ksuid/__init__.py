"""The ksuid scheme. Its modules import one way: :mod:`~app.schemes.ksuid.codec` (layout, pack/unpack, text
forms; the layout is drawn there), then :mod:`~app.schemes.ksuid.generator` (batches and the generator), then
:mod:`~app.schemes.ksuid.scheme` (settings and ``SCHEME``). The names callers use are re-exported here."""

from __future__ import annotations

from app.schemes.ksuid.codec import (
    EPOCH_S,
    PACKED_MAX,
    PAYLOAD_MAX,
    TEXT,
    TIMESTAMP_S_MAX,
    TIMESTAMP_S_MIN,
    decode,
    decode_base62,
    decode_hex,
    encode_base62,
    encode_hex,
    from_bytes,
    pack,
    to_bytes,
    unpack,
)
from app.schemes.ksuid.generator import (
    KsuidBatch,
    KsuidGenerator,
)
from app.schemes.ksuid.scheme import (
    SCHEME,
    KsuidScheme,
)

__all__ = [
    "EPOCH_S",
    "KsuidBatch",
    "KsuidGenerator",
    "KsuidScheme",
    "PACKED_MAX",
    "PAYLOAD_MAX",
    "SCHEME",
    "TEXT",
    "TIMESTAMP_S_MAX",
    "TIMESTAMP_S_MIN",
    "decode",
    "decode_base62",
    "decode_hex",
    "encode_base62",
    "encode_hex",
    "from_bytes",
    "pack",
    "to_bytes",
    "unpack",
]
