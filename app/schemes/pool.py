"""The identity pool: which identities (generator IDs, worker IDs, shards, publisher IDs, medallions) a node may
claim for one scheme, and how regions slice a scheme's identity space so that fleets never share one.

One frozen :class:`IdentityPool` per scheme, declared by the scheme module (:meth:`Scheme.identity_pool
<app.schemes.base.Scheme.identity_pool>`) and handed to the lease backends, which know no scheme: they draw from
``minimum..maximum`` (or the one static identity) and name keys and folders after the other fields.

Regions (``IDMINT_REGIONS`` = R, ``IDMINT_REGION`` = r): a scheme whose uniqueness rests on a leased identity has
its whole identity space ``space`` cut into R contiguous slices of near-equal size (:func:`region_slice`); a node
of region r claims only inside slice r. Two fleets (two etcd clusters or namespaces, two state directories) that
share no backend then never hold the same identity when they are given different regions. A scheme whose
uniqueness rests on random bits (Muid medallions: 40 random bits drawn per node) is not sliced (``sliced=False``).

This module imports nothing from the rest of idmint but its errors: schemes and lease backends both build on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.errors import ConfigError

__all__ = ["IdentityPool", "region_of", "region_slice"]


def region_slice(space: tuple[int, int], region: int, regions: int) -> tuple[int, int]:
    """The inclusive slice ``(first, last)`` of ``space`` (inclusive ``(low, high)``) that region ``region`` of
    ``regions`` owns: slice r is ``low + r*N//R .. low + (r+1)*N//R - 1`` with ``N`` identities in the space, so the
    R slices are disjoint, contiguous, cover the space and differ in size by at most one. A slice may be empty
    (``last < first``) when R > N. Raises ValueError for ``region`` outside ``0..regions-1``."""
    if not 0 <= region < regions:
        raise ValueError(f"region must be in 0..{regions - 1}, got {region}")
    low, high = space
    size = high - low + 1
    return low + region * size // regions, low + (region + 1) * size // regions - 1


def region_of(space: tuple[int, int], regions: int, identity: int) -> int | None:
    """The region whose slice of ``space`` holds ``identity`` (the inverse of :func:`region_slice`), or None when
    ``identity`` lies outside ``space``."""
    low, high = space
    if not low <= identity <= high:
        return None
    size = high - low + 1
    region = (identity - low) * regions // size
    # integer division may land one short of the owning slice; step to it
    while region + 1 < regions and identity >= low + (region + 1) * size // regions:
        region += 1
    return region


@dataclass(frozen=True)
class IdentityPool:
    """Where one scheme's identity is claimed from, decided once from settings (:meth:`IdentityPool.build`).

    * ``scheme``: scheme name (labels, logs, the embedded backend's folder);
    * ``kind``: the field's term ("generator_id", "worker_id", "shard", "publisher_id", "medallion");
    * ``space``: the scheme's whole identity space, inclusive ``(low, high)``;
    * ``region``/``regions``: this node's region and the region count; ``sliced``: False when uniqueness rests on
      random draws over the whole space (then regions do not apply and ``slice == space``);
    * ``minimum``/``maximum``: the inclusive range this node draws from: the region's slice, or the narrower
      ``IDMINT_*_POOL`` inside it;
    * ``static``: a statically configured identity (then the only candidate), or None;
    * ``claims``: identities held at once (several multiply eight-byte's and snowflake's per-tick caps);
    * ``reserved``: identities at the top of the region's slice that live issue never draws (the backfill slice,
      :attr:`backfill_range`, ``IDMINT_BACKFILL_IDENTITIES``); 0 = none;
    * ``draw``: "scan" (from a random free identity upwards, wrapping: lowest-first would make every unconfigured
      fleet start on the same identity) or "random" (uniform draws, retried on collision: Muid medallions);
    * ``group``: pool qualifier that the ID carries (cluster ID, domain hash) or that names the key space
      (snowflake layout); the embedded backend's folder; "" for none;
    * ``group_in_id``: True when ``group`` is a field of every ID (then two fleets on different groups never
      issue the same ID, whatever their identities);
    * etcd keys: ``key_prefix`` + ``key_format.format(identity)`` is the claim key, ``mark_prefix`` + the same
      segment the high-water-mark key (``key_format`` must round-trip: the backend parses segments back);
      ``allowed_groups_key``, when set, names a key listing the allowed groups as a comma list of integers
      (java-uniqueid's ``cluster-id``): a pool whose ``group`` is not listed is refused.
    """

    scheme: str
    kind: str
    space: tuple[int, int]
    minimum: int
    maximum: int
    key_prefix: str
    mark_prefix: str
    key_format: str = "{:d}"
    draw: str = "scan"
    static: int | None = None
    group: str = ""
    group_in_id: bool = False
    claims: int = 1
    allowed_groups_key: str | None = None
    region: int = 0
    regions: int = 1
    sliced: bool = True
    reserved: int = 0

    @classmethod
    def build(
        cls,
        scheme: str,
        kind: str,
        space: tuple[int, int],
        *,
        region: int = 0,
        regions: int = 1,
        sliced: bool = True,
        pool: tuple[int, int] | None = None,
        pool_setting: str = "",
        static: int | None = None,
        static_setting: str = "",
        claims: int = 1,
        reserved: int = 0,
        **more: object,
    ) -> IdentityPool:
        """The pool of ``scheme`` for region ``region`` of ``regions``.

        ``pool``: the operator's ``IDMINT_*_POOL`` (named by ``pool_setting``), or None (or the whole ``space``) for
        the region's whole slice; ``static``: a fixed identity (named by ``static_setting``). ``more``: the key and
        draw fields. ``reserved``: the top identities of the slice kept for backfill (live issue never draws them).
        Raises :class:`~app.errors.ConfigError` naming the numbers when the slice is smaller than ``claims`` (plus
        ``reserved``), or the pool or the static identity lies outside the region's slice or inside its reserve.
        """
        first, last = region_slice(space, region, regions) if sliced else space
        if reserved:
            if last - first + 1 < reserved + claims:
                raise ConfigError(
                    f"{scheme}: IDMINT_BACKFILL_IDENTITIES={reserved} leaves live issue "
                    f"{max(0, last - first + 1 - reserved)} {kind}(s) of {first}..{last}, fewer than the {claims} this "
                    "node claims; reserve fewer for backfill"
                )
            reserve = (last - reserved + 1, last)
            if static is not None and static >= reserve[0]:
                raise ConfigError(
                    f"{scheme}: {static_setting or kind}={static} lies in the backfill reserve "
                    f"{reserve[0]}..{reserve[1]} (IDMINT_BACKFILL_IDENTITIES={reserved})"
                )
            if pool is not None and pool != space and pool[1] >= reserve[0]:
                raise ConfigError(
                    f"{scheme}: {pool_setting or 'the pool'}={pool[0]}-{pool[1]} overlaps the backfill reserve "
                    f"{reserve[0]}..{reserve[1]} (IDMINT_BACKFILL_IDENTITIES={reserved})"
                )
            last -= reserved
        where = f"region {region} of {regions} ({scheme} {kind}s {first}..{last})" if sliced and regions > 1 else ""
        if last < first or last - first + 1 < claims:
            size = max(0, last - first + 1)
            raise ConfigError(
                f"{scheme}: IDMINT_REGIONS={regions} leaves region {region} a slice of {size} {kind}(s) "
                f"({space[0]}..{space[1]} split {regions} ways), fewer than the {claims} this node claims; "
                "use fewer regions or fewer claims per node"
            )
        if static is not None and not first <= static <= last:
            raise ConfigError(
                f"{scheme}: {static_setting or kind}={static} lies outside "
                f"{where or f'the {kind} space {first}..{last}'}"
            )
        low, high = first, last
        if pool is not None and pool != space:
            if not (first <= pool[0] <= pool[1] <= last):
                raise ConfigError(
                    f"{scheme}: {pool_setting or 'the pool'}={pool[0]}-{pool[1]} lies outside "
                    f"{where or f'the {kind} space {first}..{last}'}"
                )
            low, high = pool
            if high - low + 1 < claims:
                raise ConfigError(
                    f"{scheme}: {pool_setting or 'the pool'}={low}-{high} holds {high - low + 1} {kind}(s), fewer "
                    f"than the {claims} this node claims"
                )
        return cls(
            scheme=scheme,
            kind=kind,
            space=space,
            minimum=low,
            maximum=high,
            static=static,
            claims=claims,
            region=region,
            regions=regions,
            sliced=sliced,
            reserved=reserved,
            **more,  # type: ignore[arg-type]
        )

    @property
    def backfill_range(self) -> tuple[int, int] | None:
        """The inclusive identities kept for backfill (the top ``reserved`` of the region's slice), or None."""
        if not self.reserved:
            return None
        last = self.slice[1]
        return last - self.reserved + 1, last

    def backfill_pool(self) -> IdentityPool | None:
        """The pool backfill claims from: the same key space, drawing only :attr:`backfill_range`, one at a time
        (None without a reserve)."""
        bounds = self.backfill_range
        if bounds is None:
            return None
        return replace(self, minimum=bounds[0], maximum=bounds[1], static=None, claims=1)

    @property
    def slice(self) -> tuple[int, int]:
        """The inclusive ``(first, last)`` identities of this node's region (the whole space when not sliced)."""
        return region_slice(self.space, self.region, self.regions) if self.sliced else self.space

    @property
    def candidates(self) -> tuple[int, ...] | None:
        """The only identity to try (a static one), or None to draw from ``minimum..maximum``."""
        return None if self.static is None else (self.static,)

    @property
    def drawn_from(self) -> tuple[int, int]:
        """The inclusive identities this node may hold: the static one, or ``minimum..maximum``."""
        return (self.static, self.static) if self.static is not None else (self.minimum, self.maximum)

    def region_of(self, identity: int) -> int | None:
        """The region whose slice holds ``identity`` (None outside the space; always 0 when not sliced)."""
        return region_of(self.space, self.regions if self.sliced else 1, identity)
