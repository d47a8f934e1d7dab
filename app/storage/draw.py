"""The one identity-draw routine of both lease backends: which identities of a pool to try, in which order.

``scan`` tries every identity of ``minimum..maximum`` once, starting at a random one and wrapping around (not the
lowest first: fleets that share no backend would then all start on the same identity; see :mod:`app.schemes.pool`);
``random`` draws uniformly (Muid medallions: 40 random bits, so two nodes rarely try the same one): a small pool by
shuffling its free identities, a large one by up to :data:`RANDOM_DRAW_TRIES` draws retried on collision. Both try
``prefer`` first (identities this machine held before, whose marks it knows). A statically configured identity is
the only candidate. Identities in ``exclude`` or ``held`` are never yielded.
"""

from __future__ import annotations

import secrets
from collections.abc import Container, Iterable, Iterator

from app.schemes.pool import IdentityPool

RANDOM_DRAW_TRIES = 64
"""Uniform draws tried in a large pool (Muid medallions) before it counts as exhausted."""
SMALL_POOL_SIZE = 65_536
"""Pools up to this size draw "random" identities from the list of free ones instead of by rejection."""


def draw(
    pool: IdentityPool,
    held: Container[int] = frozenset(),
    prefer: Iterable[int] = (),
    exclude: Container[int] = frozenset(),
) -> Iterator[int]:
    """Candidate identities of ``pool`` in the order to try.

    ``held``: identities known to be taken; the caller may add to it as attempts fail (it is consulted at every
    step). ``prefer``: identities to try first (the embedded backend's known marks); ``exclude``: never to try.
    Raises ValueError for a ``draw`` other than "scan" or "random".
    """

    def free(identity: int) -> bool:
        return identity not in held and identity not in exclude

    if pool.candidates is not None:
        yield from (i for i in pool.candidates if free(i))
        return
    if pool.draw not in ("scan", "random"):
        raise ValueError(f"IdentityPool.draw must be 'scan' or 'random', got {pool.draw!r}")
    low, high = pool.minimum, pool.maximum
    tried: set[int] = set()
    for identity in prefer:
        if low <= identity <= high and identity not in tried and free(identity):
            tried.add(identity)
            yield identity
    size = high - low + 1
    if pool.draw == "scan":
        start = secrets.randbelow(size)
        for step in range(size):
            identity = low + (start + step) % size
            if identity not in tried and free(identity):
                yield identity
        return
    if size <= SMALL_POOL_SIZE:
        rest = [i for i in range(low, high + 1) if i not in tried and free(i)]
        while rest:
            at = secrets.randbelow(len(rest))
            rest[at], rest[-1] = rest[-1], rest[at]
            identity = rest.pop()
            if free(identity):
                yield identity
        return
    for _ in range(RANDOM_DRAW_TRIES):
        identity = low + secrets.randbelow(size)
        if free(identity):
            yield identity
