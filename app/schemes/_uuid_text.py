"""UUID text, shared by the 128-bit schemes: the 8-4-4-4-12 form and the spellings RFC 9562 readers accept.

``uuid_text`` writes any 128-bit value as 8-4-4-4-12 lowercase hex (no version check: ULID's ``uuid`` form and
TypeID's ``uuid`` field use it too). ``read_uuid_text`` reads the 8-4-4-4-12 form in any case, wrapped in ``{...}``
or after ``urn:uuid:`` (any case), and 32 hex digits in any case; only ASCII hex digits count (``int(text, 16)``
alone would accept ``_`` and non-ASCII digits).
"""

from __future__ import annotations

from app.errors import InvalidIdError

UUID_LEN = 36
HEX_LEN = 32
SEPARATOR = "-"
UUID_SEPARATOR_POSITIONS = (8, 13, 18, 23)
URN_PREFIX = "urn:uuid:"
BRACES = ("{", "}")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
UUID_ALIASES = "the 8-4-4-4-12 form, {8-4-4-4-12}, urn:uuid:8-4-4-4-12 or 32 hex digits"


def uuid_text(value: int) -> str:
    """The 8-4-4-4-12 lowercase text of any 128-bit value (no version check: TypeID and ULID use it too)."""
    d = f"{value:032x}"
    return f"{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:]}"


def read_uuid_text(text: str, label: str = "UUID") -> int:
    """The 128-bit value of ``text`` in any UUID spelling (see the module docstring), without a version check.

    Raises InvalidIdError naming the rule broken; ``label`` starts the messages.
    """
    body = text
    if body[: len(URN_PREFIX)].lower() == URN_PREFIX:
        body = body[len(URN_PREFIX) :]
        if len(body) != UUID_LEN:
            raise InvalidIdError(
                f"{label} after {URN_PREFIX} must be the {UUID_LEN}-character 8-4-4-4-12 form, got {len(body)} "
                "characters"
            )
    elif body[:1] == BRACES[0] or body[-1:] == BRACES[1]:
        if not (body[:1] == BRACES[0] and body[-1:] == BRACES[1]):
            raise InvalidIdError(f"{label} braces must enclose the whole 8-4-4-4-12 form: {{...}}")
        body = body[1:-1]
        if len(body) != UUID_LEN:
            raise InvalidIdError(
                f"{label} inside {{...}} must be the {UUID_LEN}-character 8-4-4-4-12 form, got {len(body)} characters"
            )
    if len(body) == UUID_LEN:
        for position in UUID_SEPARATOR_POSITIONS:
            if body[position] != SEPARATOR:
                raise InvalidIdError(
                    f"{label} must be 8-4-4-4-12 hex digits separated by '-': expected '-' at position {position}, "
                    f"got {body[position]!r}"
                )
        digits = body.replace(SEPARATOR, "")
        if len(digits) != HEX_LEN:
            raise InvalidIdError(f"{label} must be 8-4-4-4-12 hex digits separated by '-', got {body!r}")
    elif len(body) == HEX_LEN:
        digits = body
    else:
        raise InvalidIdError(f"{label} must be {UUID_ALIASES}; got {len(text)} characters")
    if not _HEX_DIGITS.issuperset(digits):
        char = next(c for c in digits if c not in _HEX_DIGITS)
        raise InvalidIdError(f"{label} must contain only hex digits 0-9 a-f (any case), got {char!r}")
    return int(digits, 16)
