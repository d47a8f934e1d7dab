"""The siq scheme. Its modules import one way: :mod:`~app.schemes.siq.codec` (layout, pack/unpack, text
forms; the layout is drawn there), then :mod:`~app.schemes.siq.generator` (batches and the generator), then
:mod:`~app.schemes.siq.scheme` (settings and ``SCHEME``). The names callers use are re-exported here."""

from __future__ import annotations

from app.schemes.siq.codec import (
    QUALIFIERS,
    TEXT,
    TICK_MAX,
    decode_decimal,
    decode_did,
    decode_hex,
    decode_low,
    domain_hash,
    encode_decimal,
    encode_did,
    encode_hex,
    encode_low,
    from_bytes,
    from_storage,
    ns_from_tick,
    pack,
    qualifier_name,
    qualifier_width,
    tick_from_ns,
    to_bytes,
    to_storage,
    unpack,
)
from app.schemes.siq.generator import (
    CHUNK_ROWS,
    DID_CHUNK_ROWS,
    SiqBatch,
    SiqGenerator,
    crc32_rows,
)
from app.schemes.siq.scheme import (
    SCHEME,
    SiqScheme,
    SiqSettings,
)

__all__ = [
    "QUALIFIERS",
    "CHUNK_ROWS",
    "DID_CHUNK_ROWS",
    "SCHEME",
    "SiqBatch",
    "SiqGenerator",
    "SiqScheme",
    "SiqSettings",
    "TEXT",
    "TICK_MAX",
    "crc32_rows",
    "decode_decimal",
    "decode_did",
    "decode_hex",
    "decode_low",
    "domain_hash",
    "encode_decimal",
    "encode_did",
    "encode_hex",
    "encode_low",
    "from_bytes",
    "from_storage",
    "ns_from_tick",
    "pack",
    "qualifier_name",
    "qualifier_width",
    "tick_from_ns",
    "to_bytes",
    "to_storage",
    "unpack",
]
