"""The keyed constructions (app/public/cipher.py): AES as the library gives it, the Feistel network a permutation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.public.cipher import Aes, Feistel, TimeMask, subkey

# FIPS 197, appendix C.3 (AES-256): the library's AES, as the Feistel and the mask call it.
FIPS197_KEY = bytes(range(32))
FIPS197_PLAIN = bytes.fromhex("00112233445566778899aabbccddeeff")
FIPS197_CIPHER = bytes.fromhex("8ea2b7ca516745bfeafc49904b496089")


def test_aes_is_fips_197() -> None:
    assert Aes(FIPS197_KEY).encrypt(FIPS197_PLAIN * 3) == FIPS197_CIPHER * 3


def test_subkeys_differ_by_purpose_and_secret() -> None:
    secret = bytes(32)
    assert subkey(secret, "a") != subkey(secret, "b")
    assert subkey(secret, "a") != subkey(b"\x01" + bytes(31), "a")
    assert len(subkey(secret, "a")) == 32
    with pytest.raises(ValueError, match="32 bytes"):
        subkey(bytes(16), "a")


@pytest.mark.parametrize("secret", [bytes(32), b"\xa5" * 32])
def test_feistel_on_a_full_16_bit_domain_is_a_permutation(secret: bytes) -> None:
    """The same construction (rounds, round function) on 16 bits: every input maps to a distinct output."""
    toy = Feistel(Aes(subkey(secret, "toy")), 16, 0x64)
    out = toy.encrypt(range(1 << 16))
    assert sorted(out) == list(range(1 << 16))
    assert toy.decrypt(out) == list(range(1 << 16))
    moved = sum(1 for x, y in zip(range(1 << 16), out, strict=True) if x != y)
    assert moved > 65_000  # a permutation that moves (almost) everything


@given(st.lists(st.integers(0, (1 << 85) - 1), min_size=1, max_size=50), st.binary(min_size=32, max_size=32))
def test_feistel_85_round_trips(values: list[int], secret: bytes) -> None:
    f = Feistel(Aes(subkey(secret, "f")), 85, 0x64)
    assert f.decrypt(f.encrypt(values)) == values


def test_feistel_refuses_widths_it_cannot_hold() -> None:
    aes = Aes(bytes(32))
    for bits in (1, 127):
        with pytest.raises(ValueError, match="bits"):
            Feistel(aes, bits, 0)


def test_time_mask_is_its_own_inverse_and_depends_on_the_random_bits() -> None:
    mask = TimeMask(Aes(subkey(bytes(32), "m")), 44, 0x80)
    m = mask.masks(4, [1, 2, 1])
    assert m[0] == m[2] != m[1]
    assert all(0 <= x < 1 << 44 for x in m)
    assert mask.masks(5, [1]) != mask.masks(4, [1])  # families are separated
