"""The contract every ID scheme module implements.

A scheme module (``app/schemes/<name>.py``) does no I/O and imports nothing from the web framework, etcd or
metrics. It provides:

* codec functions in pairs (``pack``/``unpack``, ``encode_<form>``/``decode_<form>``), working on the packed
  big-endian integer;
* a :class:`Scheme` subclass instance, ``SCHEME``, that the registry (:mod:`app.schemes`) serves;
* a :class:`Generator` subclass whose clock and randomness are constructor arguments.

Clocks are ``Callable[[], int]`` returning **nanoseconds since the Unix epoch** (``time.time_ns``); each generator
converts to its own unit. Random sources are ``Callable[[int], bytes]`` (``os.urandom``).

"Native timestamp" below means the scheme's own timestamp field as an integer in the scheme's unit (µs for Muid and
Wiji, ms for eight-byte and HLC-ULID, 1/65536 s for SIQ). High-water marks are stored in native units.
"""

from __future__ import annotations

import abc
import functools
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

Clock = Callable[[], int]
"""Returns nanoseconds since the Unix epoch, like :func:`time.time_ns`."""

RandomSource = Callable[[int], bytes]
"""Returns n random bytes from a CSPRNG, like :func:`os.urandom`."""


@dataclass(frozen=True)
class LayoutField:
    """One field of a bit layout: ``bits`` is "127..76" style (bit 0 = least significant)."""

    name: str
    bits: str
    description: str


@dataclass(frozen=True)
class IdentitySpec:
    """What node identity a scheme's generator needs, and where it may be drawn from.

    ``kind`` is the field's term ("generator_id", "medallion", "publisher_id", "shard"); identities are integers in
    ``minimum..maximum`` inclusive. ``draw`` is "scan" (try minimum, minimum+1, ...) or "random" (uniform draws,
    retried on collision: Muid medallions).
    """

    kind: str
    minimum: int
    maximum: int
    draw: str = "scan"


@dataclass
class GeneratorStats:
    """Counters a generator keeps for the metrics layer (read as deltas after each batch; plain ints, no locks)."""

    clock_rollbacks: int = 0
    """How many times the clock was seen below the last timestamp used."""
    max_rollback_ns: int = 0
    """The largest backwards step seen, in nanoseconds."""
    sequence_exhausted: int = 0
    """How many times the per-tick sequence/counter ran out (and the generator waited or moved time on)."""
    clock_high_ns: int = -1
    """The highest clock reading seen so far (ns), the reference for detecting a rollback."""

    def observe_clock(self, now_ns: int, unit_ns: int = 1) -> None:
        """Count a clock rollback when ``now_ns`` falls in an earlier tick (of ``unit_ns``) than the highest
        reading so far. Timestamps that run ahead of the clock (a floor above it, an HLC merge, bursts faster
        than one tick) are not rollbacks: only the clock's own readings are compared."""
        high = self.clock_high_ns
        if now_ns > high:
            self.clock_high_ns = now_ns
        elif now_ns // unit_ns < high // unit_ns:
            self.clock_rollbacks += 1
            if high - now_ns > self.max_rollback_ns:
                self.max_rollback_ns = high - now_ns


class Batch(abc.ABC):
    """IDs issued together. Shares its timestamp prefix where the scheme allows; encodes column-wise."""

    count: int
    """Number of IDs in the batch (may be 0 for a partial eight-byte batch)."""

    @abc.abstractmethod
    def encode(self, fmt: str) -> bytes:
        """All IDs in text form ``fmt``, each followed by ``b"\\n"``, ASCII. ``len == count * (width + 1)``.

        Raises :class:`~app.errors.InvalidOptionError` for an unknown format.
        """

    @abc.abstractmethod
    def values(self) -> list[int]:
        """The packed integers, in issue order (slow path: tests and small batches)."""

    @property
    @abc.abstractmethod
    def high_water(self) -> int:
        """The largest native timestamp in the batch (-1 if empty)."""

    def extra(self, fmt: str) -> dict[str, Any]:
        """Scheme-specific response members (Muid: ``{"bundle": "<offset-0 Muid>"}``)."""
        return {}


class Generator(abc.ABC):
    """Issues IDs for one node identity; monotonic; never repeats an ID, also when the clock steps back.

    ``floor`` (native units) is a high-water mark restored from the lease backend: no ID with a timestamp at or
    below it is ever issued. Not thread-safe: one generator per event loop / process.
    """

    stats: GeneratorStats

    @abc.abstractmethod
    def generate(self, count: int, **options: Any) -> Batch:
        """Issue up to ``count`` (>= 1) IDs. Never blocks for more than ~50 microseconds.

        May return fewer than ``count`` (even 0) when the scheme's rule makes it wait for the clock: eight-byte's
        64-per-ms cap, or a sequence exhausted in the current tick while the clock is behind the last timestamp
        used (clock rollback, or a floor above the clock after a restart). Callers then wait :meth:`wait_ns`
        and call again. Options are scheme-specific (``mode``, ``qualifier``, ``after``); a bad one raises
        :class:`~app.errors.InvalidOptionError`.
        """

    def wait_ns(self) -> int:
        """Nanoseconds until :meth:`generate` can issue at least one more ID (0 = now)."""
        return 0

    @property
    @abc.abstractmethod
    def high_water(self) -> int:
        """The largest native timestamp issued so far (or the floor), in native units."""


class Scheme(abc.ABC):
    """One ID scheme: metadata, strict parser, text forms, field decoding, and a generator factory."""

    name: ClassVar[str]
    """URL/metric/CLI name: muid, eight-byte, hlc-ulid, siq, wiji."""
    packed_bytes: ClassVar[int]
    """Packed size in bytes (hex in decode output has 2 * packed_bytes digits): 16, 8, 16, 14, 16."""
    formats: ClassVar[tuple[str, ...]]
    """Output text forms; the first is canonical. ``"canonical"`` is accepted everywhere as its alias."""
    text_width: ClassVar[dict[str, int]]
    """Characters per ID for each fixed-width format (decimal forms may be absent)."""
    timestamp_digits: ClassVar[int]
    """Fraction digits in the RFC 3339 timestamp: 3 (ms) or 6 (µs)."""
    native_unit_ns: ClassVar[float]
    """Nanoseconds per native timestamp unit (1_000 for µs, 1_000_000 for ms, 1e9/65536 for SIQ)."""
    layout: ClassVar[tuple[LayoutField, ...]]
    identity: ClassVar[IdentitySpec | None]
    """None for Wiji (no claimed identity)."""
    reference: ClassVar[str]
    """The scheme document / reference implementation followed."""

    @abc.abstractmethod
    def parse(self, text: str) -> int:
        """Parse any accepted text form strictly; return the packed integer.

        Raises :class:`~app.errors.InvalidIdError` whose message names the rule broken.
        """

    @abc.abstractmethod
    def format(self, value: int, fmt: str) -> str:
        """Text form ``fmt`` of a packed integer (InvalidOptionError for an unknown format)."""

    @abc.abstractmethod
    def fields(self, value: int) -> dict[str, Any]:
        """The decode fields, exactly the members the API documents for this scheme."""

    @abc.abstractmethod
    def timestamp_ns(self, value: int) -> int | None:
        """Creation time as ns since the Unix epoch (None for a sentinel such as Muid's all-F "global")."""

    def canonical(self, value: int) -> str:
        return self.format(value, self.formats[0])

    def resolve_format(self, fmt: str | None) -> str:
        """Map None/"canonical" to the canonical form; raise InvalidOptionError for a form not in ``formats``."""
        try:
            return self._format_names[fmt]
        except KeyError:
            from app.errors import InvalidOptionError

            raise InvalidOptionError(
                f"format must be one of {', '.join(('canonical',) + self.formats)} for {self.name}, got {fmt!r}"
            ) from None

    @functools.cached_property
    def _format_names(self) -> dict[str | None, str]:
        names: dict[str | None, str] = {fmt: fmt for fmt in self.formats}
        names[None] = names["canonical"] = self.formats[0]
        return names

    def native_from_ns(self, ns: int) -> int:
        """Convert ns since the epoch to the native timestamp unit (floor)."""
        return int(ns // self.native_unit_ns)
