"""The default random source: os.urandom below CSPRNG_SMALL_DRAW bytes, OpenSSL's RAND_bytes from there on."""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable

import pytest

from app.schemes import schemes
from app.schemes.base import CSPRNG_SMALL_DRAW, csprng


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


def test_every_generator_defaults_to_it() -> None:
    import inspect

    for scheme in schemes().values():
        if scheme.shares_generator_with:
            continue
        default = inspect.signature(scheme.new_generator).parameters["random"].default
        assert default is csprng, scheme.name
