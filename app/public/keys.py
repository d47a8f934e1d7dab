"""The public-ID key file (``IDMINT_PUBLIC_ID_KEYS_FILE``): TOML, one ``[[key]]`` table per key::

    [[key]]
    id = 1                 # 1..15, carried in every public text (in the clear)
    secret = "9f86d08...a08"  # 64 hex digits: 256 bits from a CSPRNG (openssl rand -hex 32)

The highest ``id`` masks new IDs; every listed key still reveals. SIGHUP re-reads the file (:meth:`PublicKeys.reload`,
the API key file's rule: the new ring replaces the old in one assignment; a file that does not load leaves the
old ring in force and logs why). A file that does not load at start-up is a :class:`~app.errors.ConfigError`
naming the file and the line of the table at fault. No message, log line or metric ever shows a secret: keys are
named by their ``id``.
"""

from __future__ import annotations

import logging
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from app.errors import ConfigError
from app.public.cipher import Aes, Feistel, TimeMask, subkey

log = logging.getLogger("idmint.public")

KEY_ID_MIN = 1
KEY_ID_MAX = 15
"""Key ids fit the 4 bits every public text carries (0 is never used, so an all-zero text opens with no key)."""
SECRET_HEX_RE = re.compile(r"[0-9a-fA-F]{64}")
TABLE_RE = re.compile(r"^[ \t]*\[\[[ \t]*key[ \t]*\]\]", re.M)
TEXT_BITS = 85
"""The 64-bit forms' Feistel block: family (3 bits), the ID (64), 18 zero check bits (app.public.forms)."""
FEISTEL_DOMAIN = 0x64
MASK_DOMAIN = 0x80


@dataclass(frozen=True, eq=False)
class PublicKey:
    """One key: its ``id`` and the constructions its secret keys (the secret itself is not kept)."""

    id: int
    feistel: Feistel
    mask: TimeMask

    def __repr__(self) -> str:
        return f"PublicKey(id={self.id})"

    @classmethod
    def from_secret(cls, key_id: int, secret: bytes) -> PublicKey:
        return cls(
            key_id,
            Feistel(Aes(subkey(secret, "feistel-85")), TEXT_BITS, FEISTEL_DOMAIN),
            TimeMask(Aes(subkey(secret, "time-mask")), 44, MASK_DOMAIN),
        )


@dataclass(frozen=True)
class KeyRing:
    """The keys in force: ``by_id`` every key (all reveal), ``current`` the highest id (masks new IDs)."""

    by_id: dict[int, PublicKey]
    current: PublicKey


def _line_of(text: str, index: int) -> int:
    """The line (1-based) of the ``index``-th ``[[key]]`` table of ``text`` (1 when it cannot be found)."""
    starts = [m.start() for m in TABLE_RE.finditer(text)]
    if index < len(starts):
        return text.count("\n", 0, starts[index]) + 1
    return 1


def load_key_file(path: Path) -> KeyRing:
    """The key ring of ``path``. Raises ConfigError naming the file, the line and the rule broken (unreadable, not
    TOML, no key, an unknown member, an id outside 1..15 or given twice, a secret that is not 64 hex digits)."""
    where = f"public-ID key file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{where}: cannot be read: {exc.__class__.__name__}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message names the line and column, never the value.
        raise ConfigError(f"{where}: not TOML: {exc}") from None
    unknown = sorted(set(data) - {"key"})
    if unknown:
        raise ConfigError(f"{where}: unknown table or member {unknown[0]!r} (line 1): the file holds [[key]] tables")
    tables = data.get("key")
    if not isinstance(tables, list) or not tables:
        raise ConfigError(f"{where}: no [[key]] table: at least one key (id, secret) is needed")
    keys: dict[int, PublicKey] = {}
    for index, table in enumerate(tables):
        line = _line_of(text, index)
        at = f"{where}, line {line} ([[key]] number {index + 1})"
        if not isinstance(table, dict):
            raise ConfigError(f"{at}: must be a table of id and secret")
        extra = sorted(set(table) - {"id", "secret"})
        if extra:
            raise ConfigError(f"{at}: unknown member {extra[0]!r}; a key takes id and secret")
        key_id = table.get("id")
        if isinstance(key_id, bool) or not isinstance(key_id, int) or not KEY_ID_MIN <= key_id <= KEY_ID_MAX:
            shown = repr(key_id) if isinstance(key_id, int) else type(key_id).__name__ if key_id is not None else "none"
            raise ConfigError(f"{at}: id must be a whole number in {KEY_ID_MIN}..{KEY_ID_MAX}, got {shown}")
        if key_id in keys:
            raise ConfigError(f"{at}: id {key_id} appears twice; each key needs its own id")
        secret = table.get("secret")
        if not isinstance(secret, str) or not SECRET_HEX_RE.fullmatch(secret):
            got = f"{len(secret)} characters" if isinstance(secret, str) else "none" if secret is None else "no text"
            raise ConfigError(
                f"{at}: key {key_id}: secret must be 64 hex digits (256 bits, e.g. openssl rand -hex 32), got {got}"
            )
        keys[key_id] = PublicKey.from_secret(key_id, bytes.fromhex(secret))
    return KeyRing(keys, keys[max(keys)])


class PublicKeys:
    """The key ring of a key file, re-read by :meth:`reload` (SIGHUP). Raises ConfigError when the file does not
    load at construction."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.ring = load_key_file(self.path)

    def reload(self) -> bool:
        """Re-read the key file; on any error keep the ring in force and log why. Returns True when replaced."""
        try:
            ring = load_key_file(self.path)
        except ConfigError as exc:
            log.error("public-ID keys not reloaded, keys %s stay in force: %s", self.ids(), exc)
            return False
        self.ring = ring
        log.info("public-ID keys reloaded from %s: keys %s, key %d masks", self.path, self.ids(), ring.current.id)
        return True

    def ids(self) -> list[int]:
        return sorted(self.ring.by_id)
