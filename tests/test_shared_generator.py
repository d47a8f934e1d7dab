"""A scheme that issues through another scheme's issuer (``shares_generator_with``), as TypeID shares UUIDv7's:
one claim, one generator, its own text through its own Batch (small batches too), metered under its own name."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from app import __version__
from app.issuing.issuer import no_charge
from app.issuing.node import Node
from app.metrics import Metrics
from app.schemes import schemes
from app.schemes.base import Batch, Generator
from app.schemes.hlc_ulid import HlcUlidScheme
from app.storage.embedded import open_embedded
from tests.helpers import make_settings, started

pytestmark = pytest.mark.anyio


class PrefixedBatch(Batch):
    def __init__(self, inner: Batch, prefix: str) -> None:
        self.inner, self.prefix, self.count = inner, prefix.encode(), inner.count

    def encode(self, fmt: str) -> bytes:
        lines = self.inner.encode(fmt)
        return b"".join(self.prefix + line + b"\n" for line in lines.splitlines())

    def values(self) -> list[int]:
        return self.inner.values()

    @property
    def high_water(self) -> int:
        return self.inner.high_water


class PrefixedGenerator(Generator):
    def __init__(self, inner: Generator) -> None:
        self.inner, self.stats = inner, inner.stats

    def generate(self, count: int, **options: Any) -> Batch:
        prefix = options.pop("prefix", "x")
        return PrefixedBatch(self.inner.generate(count, **options), prefix + "_")

    def wait_ns(self) -> int:
        return self.inner.wait_ns()

    @property
    def high_water(self) -> int:
        return self.inner.high_water


class PrefixedHlcUlid(HlcUlidScheme):
    name = "prefixed"
    shares_generator_with = "hlc-ulid"

    def share_generator(self, generator: Generator) -> Generator:
        return PrefixedGenerator(generator)


@pytest.mark.anyio
@pytest.mark.parametrize("count", [1, 5, 40_000])
async def test_a_sharing_scheme_uses_the_base_issuer_and_its_own_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    registry = {**schemes(), "prefixed": PrefixedHlcUlid()}
    monkeypatch.setattr("app.issuing.node.schemes", lambda: registry)

    settings = make_settings(tmp_path)
    node = Node(settings, open_embedded(settings, time.time_ns), Metrics(list(registry), __version__))
    async with started(node):
        base, shared = node.issuers["hlc-ulid"], node.issuers["prefixed"]
        assert shared.holder.claims is base.holder.claims and len(base.holder.claims) == 1
        assert shared.describe()["identities"] == base.describe()["identities"]
        issued = await shared.issue(count, {"prefix": "doc"}, charge=no_charge)
        lines = issued.encode("ulid").decode().splitlines()
        assert len(lines) == count and all(line.startswith("doc_") for line in lines)
        assert len(set(lines)) == count
        plain = (await base.issue(1, {}, charge=no_charge)).encode("ulid").decode().strip()
        assert plain > lines[-1].removeprefix("doc_")  # one generator: monotonic across both schemes
