"""The eight-byte scheme. Its modules import one way: :mod:`~app.schemes.eight_byte.codec` (layout, pack/unpack, text
forms; the layout is drawn there), then :mod:`~app.schemes.eight_byte.generator` (batches and the generator), then
:mod:`~app.schemes.eight_byte.scheme` (settings and ``SCHEME``). The names callers use are re-exported here."""

from __future__ import annotations

from app.schemes.eight_byte.codec import (
    CLUSTER_ID_MAX,
    GENERATOR_ID_MAX,
    SEQUENCE_MAX,
    TEXT,
    TIMESTAMP_MS_MAX,
    Mode,
    decode,
    decode_decimal,
    decode_hex,
    decode_signed,
    encode_decimal,
    encode_hex,
    encode_signed,
    from_bytes,
    pack,
    reverse_bits,
    reverse_bits_array,
    to_bytes,
    unpack,
)
from app.schemes.eight_byte.generator import (
    EightByteBatch,
    EightByteGenerator,
)
from app.schemes.eight_byte.scheme import (
    SCHEME,
    EightByteScheme,
    EightByteSettings,
)

__all__ = [
    "CLUSTER_ID_MAX",
    "EightByteBatch",
    "EightByteGenerator",
    "EightByteScheme",
    "EightByteSettings",
    "GENERATOR_ID_MAX",
    "Mode",
    "SCHEME",
    "SEQUENCE_MAX",
    "TEXT",
    "TIMESTAMP_MS_MAX",
    "decode",
    "decode_decimal",
    "decode_hex",
    "decode_signed",
    "encode_decimal",
    "encode_hex",
    "encode_signed",
    "from_bytes",
    "pack",
    "reverse_bits",
    "reverse_bits_array",
    "to_bytes",
    "unpack",
]
