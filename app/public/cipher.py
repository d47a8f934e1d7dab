"""The keyed constructions behind public IDs, over plain integers (no scheme knowledge, no I/O).

Every key's 256-bit secret is expanded with HKDF-SHA-256 (RFC 5869) into one AES-256 key per purpose (``info``
names the purpose), and AES-256 (FIPS 197, from ``cryptography``) is the keyed function of both constructions:

* :class:`Feistel`: a keyed permutation of ``bits``-bit integers, the alternating (unbalanced) Feistel network
  of NIST SP 800-38G's FF1 in radix 2 with XOR in place of modular addition: halves of ``bits // 2`` and
  ``bits - bits // 2`` bits, :data:`FEISTEL_ROUNDS` rounds, round function the first bits of
  ``AES(k, round || domain || B)``. Every key gives a bijection of the domain (tested exhaustively on 16 bits).
* :class:`TimeMask`: ``time XOR AES(k, domain || family || random)`` truncated to the time's width, the random bits
  left as they are (the UUIDv47 idea): reversible by anyone holding the key, because the mask depends only on the
  bits that stay in the clear.

Batches go through one AES-ECB call per round for all their IDs (numpy builds the blocks), so a batch of 1,000
costs a few AES passes over 16 KB rather than 10,000 Python calls.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SECRET_BYTES = 32
"""A key's secret: 256 bits."""
AES_KEY_BYTES = 32
BLOCK_BYTES = 16
FEISTEL_ROUNDS = 10
"""FF1's round count."""
HALF_BITS_MAX = 63
"""Feistel halves must fit a uint64 lane with room to shift."""
INFO_PREFIX = b"idmint public-id v1 "

U64 = npt.NDArray[np.uint64]


def subkey(secret: bytes, purpose: str) -> bytes:
    """The AES-256 key for ``purpose`` derived from ``secret`` (HKDF-SHA-256, no salt, info = prefix + purpose)."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a public-ID secret must be {SECRET_BYTES} bytes, got {len(secret)}")
    return HKDF(algorithm=hashes.SHA256(), length=AES_KEY_BYTES, salt=None, info=INFO_PREFIX + purpose.encode()).derive(
        secret
    )


class Aes:
    """AES-256 in ECB mode over whole blocks: one encryption context per key and thread, kept (creating one cost
    0.3 ms, OpenSSL 3 fetching the cipher each time; ECB over whole blocks keeps no state between calls)."""

    __slots__ = ("_cipher", "_local")

    def __init__(self, key: bytes) -> None:
        self._cipher = Cipher(algorithms.AES(key), modes.ECB())
        self._local = threading.local()

    def encrypt(self, blocks: bytes) -> bytes:
        """``blocks`` (a multiple of 16 bytes) encrypted block by block."""
        enc = getattr(self._local, "enc", None)
        if enc is None:
            enc = self._local.enc = self._cipher.encryptor()
        return enc.update(blocks)


class Feistel:
    """A keyed permutation of ``bits``-bit integers (see the module docstring); ``domain`` (0..255) separates the
    permutations one key gives for different uses. Raises ValueError for a width outside 2..126."""

    def __init__(self, aes: Aes, bits: int, domain: int) -> None:
        if not 2 <= bits <= 2 * HALF_BITS_MAX:
            raise ValueError(f"a Feistel domain must be 2..{2 * HALF_BITS_MAX} bits, got {bits}")
        self.aes = aes
        self.bits = bits
        self.u = bits // 2
        self.v = bits - self.u
        self._tweak = [np.uint64(i << 56 | domain << 48) for i in range(FEISTEL_ROUNDS)]

    def _f(self, i: int, half: U64, width: int) -> U64:
        blocks = np.empty((len(half), 2), dtype=">u8")
        blocks[:, 0] = self._tweak[i]
        blocks[:, 1] = half
        out = np.frombuffer(self.aes.encrypt(blocks.tobytes()), dtype=">u8")[0::2].astype(np.uint64)
        return out & np.uint64((1 << width) - 1)

    def encrypt_halves(self, a: U64, b: U64) -> tuple[U64, U64]:
        """Encrypt values given as their top ``u`` bits ``a`` and low ``v`` bits ``b``; returns the same split."""
        for i in range(FEISTEL_ROUNDS):
            m = self.u if i % 2 == 0 else self.v
            a, b = b, a ^ self._f(i, b, m)
        return a, b

    def decrypt_halves(self, a: U64, b: U64) -> tuple[U64, U64]:
        """The inverse of :meth:`encrypt_halves`."""
        for i in reversed(range(FEISTEL_ROUNDS)):
            m = self.u if i % 2 == 0 else self.v
            a, b = b ^ self._f(i, a, m), a
        return a, b

    def _f_int(self, i: int, half: int, width: int) -> int:
        block = int(self._tweak[i]).to_bytes(8, "big") + half.to_bytes(8, "big")
        return int.from_bytes(self.aes.encrypt(block)[:8], "big") & ((1 << width) - 1)

    def encrypt_int(self, a: int, b: int) -> tuple[int, int]:
        """:meth:`encrypt_halves` of one value, in Python integers (a single ID: no array set-up)."""
        for i in range(FEISTEL_ROUNDS):
            a, b = b, a ^ self._f_int(i, b, self.u if i % 2 == 0 else self.v)
        return a, b

    def decrypt_int(self, a: int, b: int) -> tuple[int, int]:
        for i in reversed(range(FEISTEL_ROUNDS)):
            a, b = b ^ self._f_int(i, a, self.u if i % 2 == 0 else self.v), a
        return a, b

    def encrypt(self, values: Sequence[int]) -> list[int]:
        """Each of ``values`` (0 .. 2**bits - 1) permuted (the scalar interface: tests and small domains)."""
        a, b = self._split(values)
        return self._join(*self.encrypt_halves(a, b))

    def decrypt(self, values: Sequence[int]) -> list[int]:
        a, b = self._split(values)
        return self._join(*self.decrypt_halves(a, b))

    def _split(self, values: Sequence[int]) -> tuple[U64, U64]:
        v = self.v
        low = (1 << v) - 1
        return (
            np.array([x >> v for x in values], dtype=np.uint64),
            np.array([x & low for x in values], dtype=np.uint64),
        )

    def _join(self, a: U64, b: U64) -> list[int]:
        v = self.v
        return [hi << v | lo for hi, lo in zip(a.tolist(), b.tolist(), strict=True)]


class TimeMask:
    """``time XOR PRF(random)`` (see the module docstring): ``time_bits`` wide, the random part up to 112 bits,
    ``domain`` and ``family`` (bytes 0 and 1 of the AES block) separating uses and schemes."""

    RANDOM_BITS_MAX = 112

    def __init__(self, aes: Aes, time_bits: int, domain: int) -> None:
        self.aes = aes
        self.time_bits = time_bits
        self.time_mask = (1 << time_bits) - 1
        self.domain = domain << 120

    def masks(self, family: int, randoms: Sequence[int]) -> list[int]:
        """The mask of each random part: XOR it into the time to mask, and again to unmask."""
        head = self.domain | family << self.RANDOM_BITS_MAX
        blocks = b"".join([(head | r).to_bytes(BLOCK_BYTES, "big") for r in randoms])
        out = self.aes.encrypt(blocks)
        shift = 8 * BLOCK_BYTES - self.time_bits
        return [int.from_bytes(out[i : i + BLOCK_BYTES], "big") >> shift for i in range(0, len(out), BLOCK_BYTES)]
