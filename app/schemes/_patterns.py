"""Token patterns: for every scheme and text form, a regex that each issued ID in that form matches whole.

Published per scheme in ``GET /v1/schemes`` as ``token_patterns`` (``{format: pattern}``, Python ``re`` syntax that
is also valid ECMAScript), so a client can refuse an answer that is not IDs (an empty line, ``null``, an HTML page)
before handing any of it out. A pattern states the shape only (alphabet, length, separators); the parsers remain
the judges of validity. ``tests/test_completeness.py`` checks that every registered scheme and format has one and
that issued IDs match it.
"""

from __future__ import annotations

import re._parser as sre_parse  # type: ignore[import-not-found]  # the re module's own parser: widths
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.schemes import schemes
from app.schemes.base import PUBLIC_FORMAT

if TYPE_CHECKING:
    from app.schemes.base import Scheme

HEX_LOWER = "[0-9a-f]"
UUID = f"{HEX_LOWER}{{8}}-{HEX_LOWER}{{4}}-{HEX_LOWER}{{4}}-{HEX_LOWER}{{4}}-{HEX_LOWER}{{12}}"
CROCKFORD_128 = "[0-7][0-9A-HJKMNP-TV-Z]{25}"
"""26 Crockford base32 characters holding 128 bits (the first at most 7), upper case."""


def _decimal(max_digits: int) -> str:
    """An unsigned decimal without leading zeros, at most ``max_digits`` digits."""
    return f"(?:0|[1-9][0-9]{{0,{max_digits - 1}}})"


def _hex(digits: int) -> str:
    return f"{HEX_LOWER}{{{digits}}}"


TOKEN_PATTERNS: Mapping[str, Mapping[str, str]] = {
    "muid": {"canonical": "[0-9A-F]{13}-[0-9A-F]{11}-[0-9A-F]{8}"},
    "eight-byte": {"hex": _hex(16), "decimal": _decimal(20), "signed": f"-?{_decimal(19)}"},
    "hlc-ulid": {"ulid": CROCKFORD_128, "hex": f"{_hex(12)}-{_hex(4)}-{_hex(4)}-{_hex(12)}"},
    "siq": {"did": "did:siq:[a-z2-7]{29}", "hex": _hex(28), "decimal": _decimal(34)},
    "wiji": {"base32": CROCKFORD_128, "uuid": UUID, "hex": _hex(32)},
    "uuidv7": {"uuid": UUID, "hex": _hex(32)},
    "ulid": {"ulid": CROCKFORD_128, "uuid": UUID, "hex": _hex(32)},
    # jetify TypeID: an optional lower-case prefix (at most 63 characters, underscores inside) and "_", then 26
    # lower-case Crockford base32 characters.
    "typeid": {"typeid": "(?:[a-z](?:[a-z_]{0,61}[a-z])?_)?[0-7][0-9a-hjkmnp-tv-z]{25}", "uuid": UUID},
    "ksuid": {"base62": "[0-9A-Za-z]{27}", "hex": _hex(40)},
    "snowflake": {"decimal": _decimal(19), "hex": _hex(16)},
}

PUBLIC_64 = "[0-9A-HJKMNP-TV-Z]{17}[1-9A-F]"
"""A 64-bit ID's or a sequence integer's public text: 17 Crockford base32 characters, then the key id (1..F)."""
PUBLIC_PATTERNS: Mapping[str, str] = {
    "snowflake": PUBLIC_64,
    "eight-byte": PUBLIC_64,
    # a version-4 UUID whose hex digit 12 is the key id (1..f)
    "uuidv7": f"{HEX_LOWER}{{8}}-{HEX_LOWER}{{3}}[1-9a-f]-4{HEX_LOWER}{{3}}-[89ab]{HEX_LOWER}{{3}}-{HEX_LOWER}{{12}}",
    # 130 bits in 26 characters, the top two 10: the first character is G..Q, which no ULID starts with; the
    # tenth holds bits 84..80, the key id the low four (not 0)
    "ulid": "[GHJKMNPQ][0-9A-HJKMNP-TV-Z]{8}[1-9A-FHJKMNP-TV-Z][0-9A-HJKMNP-TV-Z]{16}",
    # the public UUID in TypeID text, the prefix kept: the tenth character holds the key id (bits 84..80, the low
    # four not 0), the eleventh the version 4 (bits 79..75: 0100x)
    "typeid": "(?:[a-z](?:[a-z_]{0,61}[a-z])?_)?"
    "[0-7][0-9a-hjkmnp-tv-z]{8}[1-9a-fhjkmnp-tv-z][89][0-9a-hjkmnp-tv-z]{15}",
}
"""The public form's pattern of each scheme that has one."""


HEX_DIGITS = "0123456789abcdef"
DECIMAL_DIGITS = "0123456789"
CROCKFORD_DIGITS = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
TEXT_DIGITS: Mapping[str, Mapping[str, tuple[str, str]]] = {
    "muid": {"canonical": (HEX_DIGITS.upper(), "-")},
    "eight-byte": {"hex": (HEX_DIGITS, ""), "decimal": (DECIMAL_DIGITS, "")},
    "hlc-ulid": {"ulid": (CROCKFORD_DIGITS, ""), "hex": (HEX_DIGITS, "-")},
    "siq": {"hex": (HEX_DIGITS, ""), "decimal": (DECIMAL_DIGITS, "")},
    "snowflake": {"hex": (HEX_DIGITS, ""), "decimal": (DECIMAL_DIGITS, "")},
}
"""How an issued ID's text in a form maps to its integer, for the forms of :attr:`Scheme.identity_rising_formats
<app.schemes.base.Scheme.identity_rising_formats>`: (the digits, most significant first, whose positions are their
values: the radix is their count; the characters to drop first)."""


def _bit_ranges(bits: str) -> list[tuple[int, int]]:
    """``"15..13,11..4"`` -> [(13, 3), (4, 8)]: (shift, width) of each piece of a layout field."""
    out = []
    for piece in bits.split(","):
        high, _, low = piece.partition("..")
        top, bottom = int(high), int(low or high)
        out.append((bottom, top - bottom + 1))
    return out


def rising_per_identity(scheme: Scheme) -> dict[str, dict[str, Any]]:
    """``/v1/schemes``' ``rising_per_identity`` of ``scheme``: per form in which one issuing identity's IDs rise
    across answers, ``{"needs": {option: [values]}, "digits", "strip", "identity": [{"field", "shift", "bits"}]}``
    (the integer is the text less the ``strip`` characters read in ``digits``; the identity is the bits of each
    piece, ``shift`` bits up from bit 0). Empty for a scheme without :attr:`Scheme.identity_fields`."""
    if not scheme.identity_fields:
        return {}
    fields = {f.name: f.bits for f in scheme.layout}
    identity = [
        {"field": name, "shift": shift, "bits": width}
        for name in scheme.identity_fields
        for shift, width in _bit_ranges(fields[name])
    ]
    out: dict[str, dict[str, Any]] = {}
    for form, needs in scheme.identity_rising_formats.items():
        digits, strip = TEXT_DIGITS[scheme.name][form]
        out[form] = {
            "needs": {k: list(v) for k, v in needs.items()},
            "digits": digits,
            "strip": strip,
            "identity": identity,
        }
    return out


def token_patterns(scheme: str) -> dict[str, str]:
    """``{format: pattern}`` of ``scheme``: its entry above, else the registered scheme's own
    :attr:`~app.schemes.base.Scheme.format_patterns` (empty for an unknown name); plus ``public``
    (:data:`PUBLIC_PATTERNS`) for a scheme with a public form."""
    registered = schemes().get(scheme)
    if scheme in TOKEN_PATTERNS:
        found = dict(TOKEN_PATTERNS[scheme])
    else:
        found = dict(registered.format_patterns) if registered is not None else {}
    if registered is not None and registered.public_split is not None and scheme in PUBLIC_PATTERNS:
        found[PUBLIC_FORMAT] = PUBLIC_PATTERNS[scheme]
    return found


def max_lengths(scheme: str) -> dict[str, int]:
    """``{format: characters}``: the longest text each form of ``scheme`` can take (its token pattern's widest
    match), published in ``GET /v1/schemes`` as ``max_lengths`` so a client can bound an answer before reading it. A
    form whose pattern has no upper bound is left out."""
    found: dict[str, int] = {}
    for form, pattern in token_patterns(scheme).items():
        widest = sre_parse.parse(pattern).getwidth()[1]
        if widest < sre_parse.MAXREPEAT:
            found[form] = int(widest)
    return found
