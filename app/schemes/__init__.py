"""The registry of ID schemes served by idmint: name -> :class:`~app.schemes.base.Scheme` instance."""

from __future__ import annotations

from app.errors import UnknownSchemeError
from app.schemes.base import Scheme


def _load() -> dict[str, Scheme]:
    from app.schemes import eight_byte, hlc_ulid, ksuid, muid, siq, snowflake, typeid, ulid, uuidv7, wiji

    return {
        m.SCHEME.name: m.SCHEME for m in (muid, eight_byte, hlc_ulid, siq, wiji, uuidv7, ulid, typeid, ksuid, snowflake)
    }


_SCHEMES: dict[str, Scheme] | None = None


def schemes() -> dict[str, Scheme]:
    """All schemes, in a fixed order: muid, eight-byte, hlc-ulid, siq, wiji, uuidv7, ulid, typeid, ksuid,
    snowflake."""
    global _SCHEMES
    if _SCHEMES is None:
        _SCHEMES = _load()
    return _SCHEMES


def get_scheme(name: str) -> Scheme:
    """The scheme called ``name``; raises UnknownSchemeError naming the known ones."""
    try:
        return schemes()[name]
    except KeyError:
        raise UnknownSchemeError(f"unknown scheme {name!r}; known schemes: {', '.join(schemes())}") from None
