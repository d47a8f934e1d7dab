"""The default random source: os.urandom below CSPRNG_SMALL_DRAW bytes, OpenSSL's RAND_bytes from there on."""

from __future__ import annotations

import inspect
import os
import ssl
import time
from collections.abc import Callable

import pytest

from app.schemes import schemes
from app.schemes.base import CSPRNG_SMALL_DRAW, Generator, csprng
from app.settings import Settings


@pytest.mark.parametrize("size", [0, 1, 6, CSPRNG_SMALL_DRAW - 1, CSPRNG_SMALL_DRAW, 6 * 65_536])
def test_draws_the_size_asked_from_the_source_for_its_size(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[str] = []

    def source(name: str) -> Callable[[int], bytes]:
        def draw(n: int) -> bytes:
            used.append(name)
            return bytes(n)

        return draw

    monkeypatch.setattr(os, "urandom", source("urandom"))
    monkeypatch.setattr(ssl, "RAND_bytes", source("RAND_bytes"))
    assert len(csprng(size)) == size
    assert used == ["urandom" if size < CSPRNG_SMALL_DRAW else "RAND_bytes"]


def test_draws_differ() -> None:
    assert csprng(16) != csprng(16)
    assert csprng(4096) != csprng(4096)


def new_generator(name: str, random: Callable[[int], bytes] | None = None) -> Generator:
    """A generator of scheme ``name`` on default settings, holding the first identities of its pool."""
    scheme = schemes()[name]
    settings = Settings()
    pool = scheme.identity_pool(settings)
    identities = list(range(pool.minimum, pool.minimum + pool.claims)) if pool else []
    if random is None:
        return scheme.new_generator(settings, identities, -1, time.time_ns)
    return scheme.new_generator(settings, identities, -1, time.time_ns, random)


OWN_GENERATORS = [name for name, scheme in schemes().items() if not scheme.shares_generator_with]


@pytest.mark.parametrize("name", OWN_GENERATORS)
def test_every_generator_defaults_to_it(name: str) -> None:
    """Both the scheme's ``new_generator`` and the generator class it builds default to csprng."""
    default = inspect.signature(schemes()[name].new_generator).parameters["random"].default
    assert default is csprng
    parameters = inspect.signature(type(new_generator(name)).__init__).parameters
    for parameter in ("rng", "random"):
        if parameter in parameters:
            assert parameters[parameter].default is csprng


DRAWS = {"wiji", "uuidv7", "ulid", "ksuid", "hlc-ulid", "snowflake"}
"""The schemes whose IDs (or generator) carry random bits: muid, eight-byte and SIQ draw none."""


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_a_random_source_handed_in_is_the_one_drawn_from(name: str) -> None:
    drawn: list[int] = []

    def source(n: int) -> bytes:
        drawn.append(n)
        return csprng(n)

    generator = new_generator(name, source)
    generator.generate(1_000)
    assert drawn, f"{name} never drew from the source it was given"
