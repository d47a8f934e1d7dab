"""The public texts of IDs, and reading them back (docs/public-ids.md states the construction).

Each scheme says how its bits split (:class:`~app.schemes.base.PublicSplit`); this module turns a split and a key
into texts. Three shapes, told apart by their text alone::

    64-bit IDs and sequence integers: 18 Crockford base32 characters, e.g. 3KX0Q9ZC8M1TB4W7N2
        characters 0..16: Feistel_k(family (3 bits) | ID (64 bits) | 18 zero bits), an 85-bit keyed permutation
        character 17:     the key id (1..F)
        Revealing inverts the permutation under the key named and refuses unless the 18 check bits are zero and
        the family is known: a text no key opens is refused (a wrong key passes with odds 3 / 2**21).

    128-bit IDs with 74 random bits (UUIDv7; TypeID in its own text): a UUID of version 4, variant 10
        127                    84 83  80 79  76 75      64 63 62 61                               0
        +------------------------+------+------+----------+-----+---------------------------------+
        | time XOR PRF_k(random) | key  | 0100 | rand_a   | 10  | rand_b                          |
        +------------------------+------+------+----------+-----+---------------------------------+
        time: the ID's 48-bit millisecond timestamp, which must be below 2**44 (year 2527); PRF_k(random): the
        first 44 bits of AES-256_k(domain | family | random bits); the random bits (rand_a, rand_b) stay in
        place; the original version (7) and variant are fixed by the layout and put back on reveal.

    128-bit IDs with 80 random bits (ULID): 26 Crockford base32 characters of 130 bits
        129 128 127                  84 83  80 79                                               0
        +-------+----------------------+------+--------------------------------------------------+
        |  1 0  | time XOR PRF_k(rand) | key  | randomness (80 bits)                             |
        +-------+----------------------+------+--------------------------------------------------+
        The 128 bits of a ULID and a 4-bit key id do not fit the 122 free bits of a UUID: this form keeps them
        all, in the ULID's own alphabet and length; its first character (G..Q) is one no ULID starts with.

A 128-bit form has no check: under a wrong key of the same id it reveals a wrong time (docs/public-ids.md says
how to tell).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from app.errors import InvalidIdError, InvalidOptionError
from app.issuing.issuer import Issued
from app.public.keys import KEY_ID_MAX, KeyRing, PublicKey, PublicKeys
from app.schemes._crockford import ALPHABET
from app.schemes._uuid_text import read_uuid_text, uuid_text
from app.schemes.base import Batch, PublicSplit, Scheme

KEYS_SETTING = "IDMINT_PUBLIC_ID_KEYS_FILE"
SEQUENCE = "sequence"
"""The ``scheme`` a revealed sequence integer answers."""
SEQUENCE_FAMILY = 3
"""The family code of sequence integers (the schemes' codes: their PublicSplit)."""

ID64_BITS = 64
CHECK_BITS = 18
FAMILY_BITS = 3
BLOCK_BITS = FAMILY_BITS + ID64_BITS + CHECK_BITS  # 85
HIGH_BITS = BLOCK_BITS // 2  # 42: the Feistel's top half
LOW_BITS = BLOCK_BITS - HIGH_BITS  # 43
ID_LOW_BITS = LOW_BITS - CHECK_BITS  # 25: the ID's bits in the low half
CHAR_BITS = 5
BLOCK_CHARS = BLOCK_BITS // CHAR_BITS  # 17
TEXT64_LEN = BLOCK_CHARS + 1

TIME_BITS = 44
"""Bits of the millisecond time a 128-bit public form carries (IDs up to year 2527)."""
KEY_SHIFT = 80
TIME_SHIFT = 84
UUID_RANDOM_BITS = 74
MARKED_RANDOM_BITS = 80
V4 = 4 << 76 | 0b10 << 62
V4_MASK = 0xF << 76 | 0b11 << 62
MARK = 0b10 << 128
MARKED_LEN = 26
RAND_B_BITS = 62

_DECODE = {c: i for i, c in enumerate(ALPHABET)} | {c.lower(): i for i, c in enumerate(ALPHABET)}
_ALPHABET_ASCII = np.frombuffer(ALPHABET.encode("ascii"), dtype=np.uint8)


# -- the split of a scheme's bits ------------------------------------------------------------------------------------


class Split128:
    """A 128-bit :class:`PublicSplit` read once: the random bits' runs (position, width), from high to low."""

    def __init__(self, split: PublicSplit) -> None:
        self.split = split
        low_bits = 128 - split.time_bits
        runs: list[tuple[int, int]] = []
        bit = low_bits - 1
        while bit >= 0:
            if split.fixed_mask >> bit & 1:
                bit -= 1
                continue
            top = bit
            while bit >= 0 and not split.fixed_mask >> bit & 1:
                bit -= 1
            runs.append((bit + 1, top - bit))
        self.runs = runs
        self.random_bits = sum(w for _, w in runs)
        self.time_shift = low_bits
        if self.random_bits not in (UUID_RANDOM_BITS, MARKED_RANDOM_BITS) or split.time_bits < TIME_BITS:
            raise ValueError(f"no public form for a 128-bit split of {self.random_bits} random bits")

        self.random: Callable[[int], int] = self._random
        if len(runs) == 1:  # ULID: one run, one shift and mask an ID
            pos, mask = runs[0][0], (1 << runs[0][1]) - 1
            self.random = lambda value: value >> pos & mask
        elif len(runs) == 2:  # UUIDv7: rand_a and rand_b
            (pos_a, width_a), (pos_b, width_b) = runs
            mask_a, mask_b = (1 << width_a) - 1, (1 << width_b) - 1
            self.random = lambda value: (value >> pos_a & mask_a) << width_b | value >> pos_b & mask_b

    def _random(self, value: int) -> int:
        """The random bits of ``value``, its runs joined from high to low."""
        out = 0
        for pos, width in self.runs:
            out = out << width | (value >> pos & ((1 << width) - 1))
        return out

    def expand(self, random: int) -> int:
        out = 0
        shift = 0
        for pos, width in reversed(self.runs):
            out |= (random >> shift & ((1 << width) - 1)) << pos
            shift += width
        return out | self.split.fixed_value


# -- 64-bit texts ----------------------------------------------------------------------------------------------------


def _text64(key: PublicKey, family: int, values: Sequence[int]) -> bytes:
    """``values`` (0 .. 2**64-1) as public texts, one per line, newline-terminated (column-wise)."""
    if len(values) == 1:  # a single ID: Python integers, no arrays
        x = values[0]
        hi, lo = key.feistel.encrypt_int(
            family << (HIGH_BITS - FAMILY_BITS) | x >> ID_LOW_BITS, (x & ((1 << ID_LOW_BITS) - 1)) << CHECK_BITS
        )
        c = hi << LOW_BITS | lo
        chars = [ALPHABET[c >> (CHAR_BITS * (BLOCK_CHARS - 1 - j)) & 31] for j in range(BLOCK_CHARS)]
        return ("".join(chars) + ALPHABET[key.id] + "\n").encode("ascii")
    xs = np.array(values, dtype=np.uint64)
    high = np.uint64(family << (HIGH_BITS - FAMILY_BITS)) | (xs >> np.uint64(ID_LOW_BITS))
    low = (xs & np.uint64((1 << ID_LOW_BITS) - 1)) << np.uint64(CHECK_BITS)
    a, b = key.feistel.encrypt_halves(high, low)
    rows = np.empty((len(values), TEXT64_LEN + 1), dtype=np.uint8)
    for j in range(BLOCK_CHARS):
        shift = BLOCK_BITS - CHAR_BITS * (j + 1)
        if shift >= LOW_BITS:
            idx = a >> np.uint64(shift - LOW_BITS)
        elif shift + CHAR_BITS <= LOW_BITS:
            idx = b >> np.uint64(shift)
        else:
            idx = (a << np.uint64(LOW_BITS - shift)) | (b >> np.uint64(shift))
        rows[:, j] = _ALPHABET_ASCII[(idx & np.uint64(31)).astype(np.intp)]
    rows[:, BLOCK_CHARS] = ord(ALPHABET[key.id])
    rows[:, TEXT64_LEN] = ord("\n")
    return rows.tobytes()


def _open64(ring: KeyRing, texts: Sequence[str]) -> list[tuple[int, int, int] | None]:
    """(family, value, key id) of each 64-bit text, or None where no key opens it."""
    out: list[tuple[int, int, int] | None] = [None] * len(texts)
    groups: dict[int, list[tuple[int, int]]] = {}
    for i, text in enumerate(texts):
        key_id = _DECODE[text[BLOCK_CHARS]]
        if key_id in ring.by_id:
            c = 0
            for ch in text[:BLOCK_CHARS]:
                c = c << CHAR_BITS | _DECODE[ch]
            groups.setdefault(key_id, []).append((i, c))
    for key_id, items in groups.items():
        low_mask = (1 << LOW_BITS) - 1
        a = np.array([c >> LOW_BITS for _, c in items], dtype=np.uint64)
        b = np.array([c & low_mask for _, c in items], dtype=np.uint64)
        high, low = ring.by_id[key_id].feistel.decrypt_halves(a, b)
        for (i, _), hi, lo in zip(items, high.tolist(), low.tolist(), strict=True):
            family = hi >> (HIGH_BITS - FAMILY_BITS)
            if lo & ((1 << CHECK_BITS) - 1) or not family:
                continue
            value = (hi & ((1 << (HIGH_BITS - FAMILY_BITS)) - 1)) << ID_LOW_BITS | lo >> CHECK_BITS
            out[i] = (family, value, key_id)
    return out


def _is_text64(text: str) -> bool:
    return len(text) == TEXT64_LEN and all(c in _DECODE for c in text) and 1 <= _DECODE[text[-1]] <= KEY_ID_MAX


# -- 128-bit texts ---------------------------------------------------------------------------------------------------


def _mask128(key: PublicKey, split: Split128, values: Sequence[int]) -> list[int]:
    """The public values (128 bits, or 130 for the marked form) of ``values``."""
    randoms = [split.random(v) for v in values]
    masks = key.mask.masks(split.split.family, randoms)
    out = []
    shift = split.time_shift
    for v, r, m in zip(values, randoms, masks, strict=True):
        t = v >> shift
        if t >> TIME_BITS:
            raise InvalidOptionError(f"format=public holds times below 2**{TIME_BITS} ms (year 2527), got {t}")
        head = (t ^ m) << TIME_SHIFT | key.id << KEY_SHIFT
        if split.random_bits == UUID_RANDOM_BITS:
            out.append(head | V4 | (r >> RAND_B_BITS) << 64 | r & ((1 << RAND_B_BITS) - 1))
        else:
            out.append(MARK | head | r)
    return out


def _unmask128(ring: KeyRing, split: Split128, public: int) -> tuple[int, int] | None:
    """(the ID, key id) of a public value of ``split``'s form, or None when no key in force has its id."""
    key = ring.by_id.get(public >> KEY_SHIFT & 0xF)
    if key is None:
        return None
    if split.random_bits == UUID_RANDOM_BITS:
        r = (public >> 64 & 0xFFF) << RAND_B_BITS | public & ((1 << RAND_B_BITS) - 1)
    else:
        r = public & ((1 << MARKED_RANDOM_BITS) - 1)
    t = (public >> TIME_SHIFT & ((1 << TIME_BITS) - 1)) ^ key.mask.masks(split.split.family, [r])[0]
    return t << split.time_shift | split.expand(r), key.id


COLUMNS_MIN = 16
"""Answers of at least this many UUIDs are written column-wise (:func:`_uuid_lines`); smaller ones one by one."""
_UUID_GROUPS = ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))
"""Hex digits of each 8-4-4-4-12 group."""


def _uuid_lines(values: Sequence[int]) -> bytes:
    """``values`` (128 bits) as 8-4-4-4-12 lowercase hex lines, column-wise (one ``bytes.hex`` for all)."""
    digits = np.frombuffer(b"".join([v.to_bytes(16, "big") for v in values]).hex().encode("ascii"), dtype=np.uint8)
    digits = digits.reshape(len(values), 32)
    rows = np.full((len(values), 37), ord("-"), dtype=np.uint8)
    for group, (start, end) in enumerate(_UUID_GROUPS):
        rows[:, start + group : end + group] = digits[:, start:end]
    rows[:, 36] = ord("\n")
    return rows.tobytes()


def _marked_text(value: int) -> str:
    return "".join(ALPHABET[value >> (CHAR_BITS * (MARKED_LEN - 1 - j)) & 31] for j in range(MARKED_LEN))


def _read_marked(text: str) -> int | None:
    if len(text) != MARKED_LEN or not all(c in _DECODE for c in text):
        return None
    value = 0
    for c in text:
        value = value << CHAR_BITS | _DECODE[c]
    return value & ((1 << 128) - 1) if value >> 128 == MARK >> 128 else None


def _read_uuid(text: str) -> int | None:
    if len(text) not in (32, 36):
        return None
    try:
        value = read_uuid_text(text)
    except InvalidIdError:
        return None
    return value if value & V4_MASK == V4 else None


# -- the service -----------------------------------------------------------------------------------------------------


class PublicBatch(Batch):
    """A batch in its public form: :meth:`encode` writes public texts whatever ``fmt`` says."""

    def __init__(self, public: Public, ring: KeyRing, scheme: Scheme, inner: Batch) -> None:
        self.public = public
        self.ring = ring
        self.scheme = scheme
        self.inner = inner
        self.count = inner.count

    def encode(self, fmt: str) -> bytes:
        return self.public.lines(self.ring, self.scheme, self.inner.values(), self.inner)

    def values(self) -> list[int]:
        return self.inner.values()

    @property
    def high_water(self) -> int:
        return self.inner.high_water


class Public:
    """Public forms for the schemes of a node (``registry``: name -> scheme as the node uses it) under the keys of
    ``keys`` (None: no key file, and every public request is a 422 naming :data:`KEYS_SETTING`)."""

    def __init__(self, keys: PublicKeys | None, registry: Mapping[str, Scheme]) -> None:
        self.keys = keys
        self.registry = registry
        self.by_family: dict[int, Scheme] = {}
        self.splits: dict[int, Split128] = {}
        self.uuid_owner: Scheme | None = None
        self.marked_owner: Scheme | None = None
        self.wrappers: list[Scheme] = []
        for scheme in registry.values():
            split = scheme.public_split
            if split is None:
                continue
            if split.bits == 128:
                split128 = self.splits.setdefault(split.family, Split128(split))
                if type(scheme).public_value is not Scheme.public_value:
                    self.wrappers.append(scheme)
                elif split128.random_bits == UUID_RANDOM_BITS:
                    self.uuid_owner = scheme
                else:
                    self.marked_owner = scheme
            else:
                self.by_family[split.family] = scheme

    def ring(self) -> KeyRing:
        """The keys in force; InvalidOptionError naming the setting when there is no key file."""
        if self.keys is None:
            raise InvalidOptionError(
                f"format=public and /v1/public need public-ID keys: set {KEYS_SETTING} to a key file "
                "(docs/public-ids.md)"
            )
        return self.keys.ring

    def schemes(self) -> list[str]:
        return [name for name, s in self.registry.items() if s.public_split is not None]

    def check_scheme(self, scheme: Scheme) -> None:
        """InvalidOptionError when ``scheme`` has no public form."""
        if scheme.public_split is None:
            raise InvalidOptionError(
                f"format=public is not available for {scheme.name}; it is for {', '.join(self.schemes())}"
            )

    # -- issuing -------------------------------------------------------------------------------------------
    def lines(self, ring: KeyRing, scheme: Scheme, values: Sequence[int], batch: Batch | None) -> bytes:
        """``values`` of ``scheme`` as public texts under the ring's current key, one per line."""
        split = scheme.public_split
        assert split is not None
        key = ring.current
        if split.bits == ID64_BITS:
            return _text64(key, split.family, values)
        split128 = self.splits[split.family]
        publics = _mask128(key, split128, values)
        if (
            len(publics) >= COLUMNS_MIN
            and split128.random_bits == UUID_RANDOM_BITS
            and type(scheme).public_text is Scheme.public_text
        ):
            return _uuid_lines(publics)
        texts = []
        for public in publics:
            if public >> 128:
                text = _marked_text(public)
            else:
                text = scheme.public_text(public, uuid_text(public), batch)
            texts.append(text)
        return ("\n".join(texts) + "\n").encode("ascii")

    def sequence_lines(self, ring: KeyRing, values: Sequence[int]) -> bytes:
        """Sequence integers (0 .. 2**63-1) as public texts, one per line."""
        return _text64(ring.current, SEQUENCE_FAMILY, values)

    def wrap(self, ring: KeyRing, issued: Issued) -> Issued:
        """``issued`` whose batches encode to public texts under ``ring``."""
        scheme = issued.scheme
        return Issued(scheme, [PublicBatch(self, ring, scheme, b) for b in issued.batches])

    # -- revealing -----------------------------------------------------------------------------------------
    def reveal(self, texts: Sequence[str], ring: KeyRing | None = None) -> list[tuple[Scheme | None, int, int] | str]:
        """Each text read back under ``ring`` (None: the keys in force now): (the scheme, or None for a sequence
        integer; the ID as the scheme reads it; the key id), or the reason it is refused (a text no key in force
        opens). A caller revealing one batch in several calls passes the ring it read once, so that a key file
        reloaded meanwhile (SIGHUP) cannot split the batch between two sets of keys."""
        ring = self.ring() if ring is None else ring
        out: list[tuple[Scheme | None, int, int] | str] = ["no key in force opens this public ID"] * len(texts)
        short = [(i, t) for i, t in enumerate(texts) if _is_text64(t)]
        for (i, _), opened in zip(short, _open64(ring, [t for _, t in short]), strict=True):
            if opened is not None:
                family, value, key_id = opened
                if family == SEQUENCE_FAMILY:
                    out[i] = (None, value, key_id)
                elif family in self.by_family:
                    out[i] = (self.by_family[family], value, key_id)
        done = {i for i, _ in short}
        for i, text in enumerate(texts):
            if i not in done:
                found = self._reveal128(ring, text)
                if found is not None:
                    out[i] = found
        return out

    def _reveal128(self, ring: KeyRing, text: str) -> tuple[Scheme, int, int] | None:
        candidates: Iterable[tuple[Scheme, int, str]] = ()
        public = _read_marked(text)
        if public is not None and self.marked_owner is not None:
            candidates = [(self.marked_owner, public, "")]
        else:
            public = _read_uuid(text)
            if public is not None and self.uuid_owner is not None:
                candidates = [(self.uuid_owner, public, "")]
            else:
                found = []
                for scheme in self.wrappers:
                    read = scheme.public_value(text)
                    if read is not None and read[0] & V4_MASK == V4:
                        found.append((scheme, read[0], read[1]))
                candidates = found
        for scheme, value, context in candidates:
            split = scheme.public_split
            assert split is not None
            opened = _unmask128(ring, self.splits[split.family], value)
            if opened is not None:
                return scheme, scheme.public_revealed(opened[0], context), opened[1]
        return None

    def answer(self, found: tuple[Scheme | None, int, int] | str, decode: Any) -> dict[str, Any]:
        """The JSON item of one revealed text: ``{"id", "scheme", "key_id", "decoded"}`` (``decoded``: the decode
        object, null for a sequence integer), or ``{"error"}``. ``decode(scheme, value)`` builds the decode
        object."""
        if isinstance(found, str):
            return {"error": found}
        scheme, value, key_id = found
        if scheme is None:
            return {"id": str(value), "scheme": SEQUENCE, "key_id": key_id, "decoded": None}
        return {
            "id": scheme.canonical(value),
            "scheme": scheme.name,
            "key_id": key_id,
            "decoded": decode(scheme, value),
        }
