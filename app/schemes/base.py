"""The contract every ID scheme module implements.

A scheme module (``app/schemes/<name>.py``) does no I/O and imports nothing from the web framework, etcd or
metrics. It provides:

* codec functions in pairs (``pack``/``unpack``, ``encode_<form>``/``decode_<form>``), working on the packed
  big-endian integer;
* a :class:`Scheme` subclass instance, ``SCHEME``, that the registry (:mod:`app.schemes`) serves;
* a :class:`Generator` subclass whose clock and randomness are constructor arguments, and its :class:`Batch`
  (a big scheme is a package: ``codec``, then ``generator``, then ``scheme``, importing one way, its
  ``__init__`` re-exporting; numpy text helpers are in :mod:`app.schemes._text`).

Everything the service knows about a scheme comes from its ``SCHEME`` (nothing outside ``app/schemes`` names a
scheme): besides the codec members, a scheme declares ``title``, ``example``, ``captions`` (one per decode field),
``token_pattern``, ``options`` (:class:`SchemeOption`: the issue routes parse them with one model per scheme),
``settings_model`` (fields joined into :class:`app.settings.Settings`), ``uniqueness`` and ``uniqueness_note``,
:meth:`Scheme.identity_pool` (an :class:`~app.schemes.pool.IdentityPool`: the region's slice of the identity space and
its etcd keys) and :meth:`Scheme.new_generator` (or ``shares_generator_with`` + :meth:`Scheme.share_generator`), and
optionally :meth:`Scheme.describe`, :meth:`Scheme.node_info`, :meth:`Scheme.registration`, :meth:`Scheme.words`,
:meth:`Scheme.summary`, ``decode_options`` with :meth:`Scheme.with_decode_options`, and :meth:`Scheme.configured`.
Registering it is one line in :func:`app.schemes._load`; ``tests/test_completeness.py`` then checks it is served
everywhere.

Clocks are ``Callable[[], int]`` returning **nanoseconds since the Unix epoch** (``time.time_ns``); each generator
converts to its own unit. Random sources are ``Callable[[int], bytes]`` (:func:`csprng` by default).

"Native timestamp" below means the scheme's own timestamp field as an integer in the scheme's unit (µs for Muid and
Wiji, ms for eight-byte and HLC-ULID, 1/65536 s for SIQ). High-water marks are stored in native units.
"""

from __future__ import annotations

import abc
import functools
import os
import re
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import pydantic

from app.schemes.pool import IdentityPool

if TYPE_CHECKING:
    from app.schemes.time_order import TimeOrder

Clock = Callable[[], int]
"""Returns nanoseconds since the Unix epoch, like :func:`time.time_ns`."""

RandomSource = Callable[[int], bytes]
"""Returns n random bytes from a CSPRNG, like :func:`csprng` or :func:`os.urandom`."""

PUBLIC_FORMAT = "public"
"""The ``format`` of public IDs (docs/public-ids.md, :mod:`app.public`): on the issue routes and a sequence's
``next``, and the form name under which a scheme with a public form publishes its token pattern (public IDs keep no
order, so it is never among a scheme's rising forms)."""

CSPRNG_SMALL_DRAW = 256
"""Draws shorter than this many bytes come from :func:`os.urandom`, longer ones from :func:`ssl.RAND_bytes`."""


def csprng(n: int) -> bytes:
    """``n`` bytes from a CSPRNG, the default random source of every generator.

    Small draws (under :data:`CSPRNG_SMALL_DRAW` bytes: single IDs and small batches) come from :func:`os.urandom`
    (the kernel's getrandom), larger ones (column-wise batches and stream chunks) from :func:`ssl.RAND_bytes`
    (OpenSSL's DRBG, seeded from the kernel and reseeded after fork): each is the faster for its sizes (figures:
    docs/serving.md, "Figures behind choices in the code").
    Raises ValueError for a negative ``n``, :class:`ssl.SSLError` if OpenSSL's generator fails.
    """
    return os.urandom(n) if n < CSPRNG_SMALL_DRAW else ssl.RAND_bytes(n)


@dataclass(frozen=True)
class LayoutField:
    """One field of a bit layout: ``bits`` is "127..76" style (bit 0 = least significant)."""

    name: str
    bits: str
    description: str


@dataclass(frozen=True)
class SchemeOption:
    """A request option of one scheme: a query parameter (GET) or JSON member (POST) of the issue routes, or (in
    :attr:`Scheme.decode_options`) a query parameter of ``GET /v1/decode/{scheme}/{id}``.

    ``name`` is the parameter name ("mode", "type", "after"); ``kwarg`` the keyword passed to
    :meth:`Generator.generate` ("mode", "qualifier", "after", "prefix"); ``description`` one sentence shown in
    /v1/schemes and OpenAPI; ``choices`` the allowed values when they are a fixed set (checked by the default
    :meth:`Scheme.parse_option`).
    """

    name: str
    kwarg: str
    description: str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class PublicSplit:
    """How a scheme's packed bits split for its public form (``format=public``, built by :mod:`app.public`).

    ``family`` (1..7) is the code a public text carries for the scheme (unique among splits; a scheme sharing
    another's generator shares its split); ``bits`` is 64 or 128. For 128 bits: the top ``time_bits`` are the
    millisecond timestamp that is masked, ``fixed_mask`` the bits the layout always sets to ``fixed_value``
    (version and variant: not carried), every other bit is random and kept as it is.
    """

    family: int
    bits: int
    time_bits: int = 0
    fixed_mask: int = 0
    fixed_value: int = 0


class SchemeSettings(pydantic.BaseModel):
    """Base of every scheme's :attr:`Scheme.settings_model`. Its hooks receive the node's whole
    :class:`app.settings.Settings`, which joins that model to :class:`app.settings.CoreSettings`; the core fields a
    hook may read are declared here for the type checker only (at run time this model has no fields)."""

    if TYPE_CHECKING:
        region: int
        """This fleet's region (``IDMINT_REGION``)."""
        regions: int
        """How many regions slice every leased identity space (``IDMINT_REGIONS``)."""
        backfill_identities: int
        """Identities at the top of each region's slice kept for backfill (``IDMINT_BACKFILL_IDENTITIES``)."""


IDMINT_KEY_PREFIX = "idmint/"
"""etcd keys of idmint's own pools live under ``<namespace>idmint/<scheme>/``."""
MARKS_KEY_PREFIX = "idmint/marks/"
"""High-water marks live under ``<namespace>idmint/marks/<scheme>/`` (on no lease: they outlive holders)."""


def idmint_pool(
    scheme: str, kind: str, space: tuple[int, int], settings: SchemeSettings, *, group: str = "", **more: Any
) -> IdentityPool:
    """The usual pool: claims at ``idmint/<scheme>/[<group>/]<identity>``, marks at
    ``idmint/marks/<scheme>/[<group>/]<identity>``, in the region ``settings.region`` of ``settings.regions``.
    ``more`` goes to :meth:`IdentityPool.build` (pool, static, claims, draw, ...). Raises ConfigError as it does."""
    rest = f"{scheme}/{group}/" if group else f"{scheme}/"
    return IdentityPool.build(
        scheme,
        kind,
        space,
        region=settings.region,
        regions=settings.regions,
        key_prefix=IDMINT_KEY_PREFIX + rest,
        mark_prefix=MARKS_KEY_PREFIX + rest,
        group=group,
        **more,
    )


def no_options(scheme: str, options: Mapping[str, str], takes: tuple[str, ...] = ()) -> None:
    """Raise :class:`~app.errors.InvalidOptionError` naming any of ``options`` not in ``takes``."""
    unknown = sorted(set(options) - set(takes))
    if unknown:
        from app.errors import InvalidOptionError

        named = ", ".join(name[:100] for name in unknown[:10])
        raise InvalidOptionError(
            f"unknown parameter {named} for {scheme}" + (f"; it takes {', '.join(takes)}" if takes else "")
        )


def grouped(value: int) -> str:
    """``value`` with thousands separators ("1,234,567"), for :meth:`Scheme.words`."""
    return f"{value:,}"


def hex_word(value: int, digits: int) -> str:
    """``value`` as ``0x`` + uppercase hex, zero-padded to ``digits`` ("0x000A"), for :meth:`Scheme.words`."""
    return f"-0x{-value:0{digits}X}" if value < 0 else f"0x{value:0{digits}X}"


class TextForms:
    """A scheme's text forms: format name -> encoder of a packed integer, the first canonical (``"canonical"`` is
    its alias). Lives with the codec, so the scheme and its batches format through one table without importing
    each other: ``TEXT = TextForms("ksuid", base62=encode_base62, hex=encode_hex)``."""

    def __init__(self, scheme: str, **encoders: Callable[[int], str]) -> None:
        self.scheme = scheme
        self.encoders = encoders
        self.formats = tuple(encoders)
        self._names: dict[str | None, str] = {fmt: fmt for fmt in self.formats}
        self._names[None] = self._names["canonical"] = self.formats[0]

    def resolve(self, fmt: str | None) -> str:
        """Map None/"canonical" to the canonical form; raise InvalidOptionError for a form not in ``formats``."""
        try:
            return self._names[fmt]
        except KeyError:
            from app.errors import InvalidOptionError

            raise InvalidOptionError(
                f"format must be one of {', '.join(('canonical',) + self.formats)} for {self.scheme}, got {fmt!r}"
            ) from None

    def format(self, value: int, fmt: str) -> str:
        """Text form ``fmt`` of a packed integer (InvalidOptionError for an unknown format)."""
        name = self._names.get(fmt)
        return self.encoders[name if name is not None else self.resolve(fmt)](value)


SMALL_BATCH = 8
"""Up to this many IDs, per-ID scalar formatting beats the column-wise numpy encoders' fixed cost."""


def scalar_lines(format_one: Callable[[int, str], str], values: list[int], fmt: str) -> bytes:
    """``values`` formatted one by one with ``format_one(value, fmt)``, each followed by a newline (ASCII): the
    small-batch path of :meth:`Batch.encode`."""
    if len(values) == 1:  # a single-ID request
        return (format_one(values[0], fmt) + "\n").encode("ascii")
    return "".join([format_one(v, fmt) + "\n" for v in values]).encode("ascii")


class Run(NamedTuple):
    """``count`` consecutive slots of one tick, the piece every batch is made of: ``tick`` is the timestamp in
    native units, ``first`` the first slot used in it (a sequence, counter or random value, or eight-byte's and
    snowflake's slot = generator index * sequences + sequence)."""

    tick: int
    first: int
    count: int  # type: ignore[assignment]  # the field shadows tuple.count; mypy wants a method there


def runs_count(runs: Sequence[Run]) -> int:
    """IDs in ``runs`` (the sum of their counts; a lone run's count without a generator expression)."""
    return runs[0].count if len(runs) == 1 else sum(run.count for run in runs)


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

        Every path formats through here, small batches too (so a wrapping batch, such as one adding a prefix, is
        never bypassed); an implementation picks the scalar path (:func:`scalar_lines`) for up to
        :data:`SMALL_BATCH` IDs when that is faster. Raises :class:`~app.errors.InvalidOptionError` for an unknown
        format.
        """

    def encode_lines(self, fmt: str) -> bytes | bytearray | memoryview:
        """The same text as :meth:`encode`, possibly in a fresh ``bytearray`` (or a byte-wise view of a fresh
        buffer) the caller owns: a stream sends it as it is, with no copy to ``bytes``. Raises as :meth:`encode`."""
        return self.encode(fmt)

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

    def json_members(self, fmt: str) -> bytes | bytearray | memoryview | None:
        """All IDs in text form ``fmt`` as the members of a JSON array of strings, ``"ID1","ID2",...,"IDn"`` (ASCII,
        quotes and commas included, no brackets), or None when this batch writes no such framing of its own (the
        caller then frames :meth:`encode`'s lines). The bytes hold the same IDs as :meth:`encode`, in the same
        order; a view is valid until the caller's next call on this thread (callers copy it out). Raises as
        :meth:`encode`."""
        return None


class ScalarBatch(Batch):
    """IDs formatted one by one (:func:`scalar_lines`): the default batch. A scheme writes a column-wise (numpy)
    encoder of its own only where a benchmark (``bench/``) shows the need."""

    def __init__(self, text_forms: TextForms, values: list[int], high_water: int) -> None:
        self.text_forms = text_forms
        self._values = values
        self.count = len(values)
        self._high_water = high_water

    def encode(self, fmt: str) -> bytes:
        return scalar_lines(self.text_forms.format, self._values, self.text_forms.resolve(fmt))

    def values(self) -> list[int]:
        return self._values

    @property
    def high_water(self) -> int:
        return self._high_water if self._values else -1


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

    def check_time(self) -> None:
        """Raise :class:`~app.errors.TimeRangeError` when the clock is outside the times this generator's layout
        encodes (before its epoch, past its end); a layout that lasts (the default) never does."""

    @property
    def lookback_ns(self) -> int:
        """How long (ns) capacity left unused stays usable: a caller that sleeps up to this long between calls
        still gets the scheme's full cap (eight-byte's ``lookback_ms``, snowflake's lookback units). 0 (the
        default) = a tick not used as it passes is lost, or the scheme has no cap."""
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
    """Output text forms; the first is canonical. ``"canonical"`` is accepted everywhere as its alias. Set from
    :attr:`text_forms` when the scheme declares that table."""
    text_forms: ClassVar[TextForms | None] = None
    """The codec's table of text forms (:class:`TextForms`): when set, it gives :attr:`formats` and the default
    :meth:`format`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        forms = cls.__dict__.get("text_forms")
        if forms is not None:
            cls.formats = forms.formats
            if "format" not in cls.__dict__:  # the table's own method, one call less on every formatted ID
                setattr(cls, "format", staticmethod(forms.format))  # noqa: B010

    rising_formats: ClassVar[dict[str, dict[str, tuple[str, ...]]]] = {}
    """Text forms in which the IDs of one answer (one batch, or one stream from its first line to its last: one
    generator's) strictly rise as strings (byte order), each mapped to the options a request must name for it
    (option -> values; ``{}``: always): ``{"hex": {"mode": ("time_sequential",)}}``. Published in ``/v1/schemes``
    as ``rising``; the clients refuse an answer that does not rise in such a form (a proxy splicing an old answer's
    IDs between fresh ones). Only within one answer: one URL may front several generators, whose IDs do not rise
    among themselves. A form left out does not rise (the scheme's own docstring of this attribute says why);
    decimal forms without a fixed width never byte-sort."""

    identity_fields: ClassVar[tuple[str, ...]] = ()
    """Layout fields that together name the generator an ID came from (snowflake's ``worker_id``; eight-byte's
    ``generator_id``, ``mode`` and ``cluster_id``): one generator's IDs take these bits from its identity. Empty
    for schemes whose IDs carry no issuing identity."""
    identity_rising_formats: ClassVar[dict[str, dict[str, tuple[str, ...]]]] = {}
    """Text forms in which one identity's IDs (equal :attr:`identity_fields`) strictly rise as integers across
    answers, each mapped to the options a request must name for it (as :attr:`rising_formats`). It holds because
    the generator on an identity hands out IDs strictly above the last one it issued, and a generator on a claimed
    identity starts above the claim's recorded high-water mark (a restart, another worker or replica taking it over).
    Published in ``/v1/schemes`` as ``rising_per_identity`` with how to read the integer from the text; the clients
    refuse an ID at or below one of the same identity received before."""

    text_width: ClassVar[dict[str, int]]
    """Characters per ID for each fixed-width format (decimal forms may be absent)."""
    timestamp_digits: ClassVar[int]
    """Fraction digits in the RFC 3339 timestamp: 3 (ms) or 6 (µs)."""
    native_unit_ns: ClassVar[float]
    """Nanoseconds per native timestamp unit (1_000 for µs, 1_000_000 for ms, 1e9/65536 for SIQ)."""
    timestamp_native_max: ClassVar[int | None] = None
    """The latest timestamp the ID can hold, in native units since the Unix epoch (None: the scheme has no time);
    :meth:`id_space_end_ns` follows from it."""
    layout: ClassVar[tuple[LayoutField, ...]]
    uniqueness: ClassVar[str] = "random"
    """What two nodes' IDs differ by: "identity" (a leased identity that regions slice: :meth:`identity_pool`) or
    "random" (random bits; no slice needed, :attr:`uniqueness_note` says which)."""
    uniqueness_note: ClassVar[str] = ""
    """One sentence on what makes this scheme's IDs unique across nodes and fleets (shown in /v1/schemes)."""
    reference: ClassVar[str]
    """The scheme document / reference implementation followed."""

    # -- what the rest of the service learns from the scheme (nothing outside app/schemes names a scheme) --------
    title: ClassVar[str]
    """Human name for the decode page: "Muid (Gink)", "UUIDv7 (RFC 9562)"."""
    example: ClassVar[str]
    """One valid canonical ID (a spec vector where there is one): the page's example button, and tests."""
    captions: ClassVar[dict[str, str]] = {}
    """Decode field name -> one-sentence caption for the decode page (served by ``/v1/schemes``). Every member of
    :meth:`fields` should have one (the completeness test checks)."""
    token_pattern: ClassVar[str | None] = None
    """Regex (no anchors, no capturing groups needed) of this scheme's ID shape in free text. A token of this shape
    is shown even when it does not parse, so a support engineer sees why the ID in a log line is invalid."""
    format_patterns: ClassVar[dict[str, str]] = {}
    """Format -> regex of an issued ID's whole shape in that form (published in ``/v1/schemes`` as
    ``token_patterns``; the built-in schemes' live in :mod:`app.schemes._patterns`)."""
    options: ClassVar[tuple[SchemeOption, ...]] = ()
    """The issue routes' scheme-specific parameters (query parameters of GET, JSON members of POST)."""
    decode_options: ClassVar[tuple[SchemeOption, ...]] = ()
    """Query parameters of ``GET /v1/decode/{scheme}/{id}`` (snowflake: "layout"); unknown ones are a 422."""
    settings_model: ClassVar[type[pydantic.BaseModel] | None] = None
    """A :class:`SchemeSettings` model whose fields join :class:`app.settings.Settings` (env ``IDMINT_<FIELD>``),
    each with ``Field(description=...)`` (docs/settings.md's table documents them), plus its validators; the
    scheme's hooks take ``settings`` typed as that model. None = none."""
    shares_generator_with: ClassVar[str | None] = None
    """The name of the scheme whose issuer (generator, claimed identity, marks) this scheme issues through; the node
    builds this scheme's generator with :meth:`share_generator` from that scheme's. None = its own issuer."""

    public_split: ClassVar[PublicSplit | None] = None
    """How the scheme's bits split for ``format=public`` (:class:`PublicSplit`); None: no public form."""

    def public_text(self, public: int, text: str, batch: Batch | None) -> str:
        """The public text of a 128-bit public value ``public`` whose default text is ``text`` (a UUID), for an ID
        of ``batch`` (TypeID: the batch's prefix and base32). Default: ``text``."""
        return text

    def public_value(self, text: str) -> tuple[int, str] | None:
        """``text`` read as this scheme's own public text (:meth:`public_text`): (the 128-bit public value, what
        else the text carries, e.g. TypeID's prefix), or None when ``text`` is not of that shape (the default)."""
        return None

    def public_revealed(self, value: int, context: str) -> int:
        """The revealed ID ``value`` with what its public text carried (:meth:`public_value`). Default: ``value``."""
        return value

    def parse_option(self, name: str, text: str) -> Any:
        """Validate option ``name``'s text; return the value passed to :meth:`Generator.generate` as its kwarg.

        Default: the text itself, checked against ``choices`` when the option has them. Raises
        :class:`~app.errors.InvalidOptionError` naming the rule (or the option as unknown to this scheme).
        """
        from app.errors import InvalidOptionError

        for option in self.options:
            if option.name == name:
                if option.choices and text not in option.choices:
                    raise InvalidOptionError(
                        f"{name} must be one of {', '.join(option.choices)} for {self.name}, got {text!r}"
                    )
                return text
        if not self.options:
            raise InvalidOptionError(f"{self.name} takes no options, got {name!r}")
        raise InvalidOptionError(f"{self.name} has no option {name!r}")

    def identity_pool(self, settings: Any) -> IdentityPool | None:
        """Where this node claims the scheme's identity under ``settings`` (the region's slice of the identity
        space: :func:`idmint_pool`); None = nothing to claim (Wiji). Raises ConfigError for a pool, static
        identity or claim count that does not fit the region's slice."""
        return None

    def identity_settings(self, settings: Any) -> dict[str, Any]:
        """The settings beyond regions that move this scheme's IDs' bits while its identities keep their numbers
        (snowflake: the layout), in a canonical form (two spellings of one value are equal). Every replica of a
        fleet must agree on them: the node checks them against the fleet's record before claiming
        (:meth:`app.issuing.holder.IdentityHolder.acquire`). Default: none."""
        return {}

    def new_generator(
        self, settings: Any, identities: list[int], floor: int, clock: Clock, random: RandomSource = csprng
    ) -> Generator:
        """A generator for the claimed ``identities`` (``IdentityPool.claims`` of them; [] without a pool), that
        issues nothing at or below ``floor`` (native units; -1 = none), reading ``clock``. Must be overridden
        unless :attr:`shares_generator_with` is set."""
        raise NotImplementedError(f"{self.name} builds no generator of its own")

    def share_generator(self, generator: Generator) -> Generator:
        """This scheme's generator on top of the generator of :attr:`shares_generator_with` (a TypeID generator
        wraps the UUIDv7 one: its batches wrap the UUIDv7 batches and add the prefix). Called again whenever the
        shared generator is replaced (a re-claim)."""
        raise NotImplementedError(f"{self.name} shares no generator")

    def describe(self, settings: Any) -> dict[str, Any]:
        """Extra members of this scheme's ``/v1/schemes`` entry ("limits" members are merged into the limits)."""
        return {}

    def node_info(self, settings: Any, generator: Generator | None) -> dict[str, Any]:
        """Extra members of this scheme's per-node state in ``/v1/schemes`` (its "node" object)."""
        return {}

    def registration(self, generator: Generator) -> str | None:
        """A name this node publishes for the scheme without exclusivity (Wiji: its random part, 13 hex digits);
        None = nothing to publish."""
        return None

    def words(self, fields: dict[str, Any]) -> dict[str, str]:
        """What each decoded field says, in words, for the decode page ("medallion 0x1BFC71B112D"); a field left
        out is shown as its value."""
        return {}

    def summary(self, fields: dict[str, Any]) -> str:
        """One line in words about the ID's maker, for the decode page and its CSV (default: the fields)."""
        return ", ".join(f"{name} {value}" for name, value in fields.items())

    def configured(self, settings: Any) -> Scheme:
        """This scheme as the node with ``settings`` uses it (snowflake: in the node's layout). Default: self."""
        return self

    def with_decode_options(self, **options: str) -> Scheme:
        """This scheme reading IDs with the given :attr:`decode_options` (snowflake: ``layout=...``). Default:
        self; raises :class:`~app.errors.InvalidOptionError` for an option it does not declare."""
        declared = {o.name for o in self.decode_options}
        unknown = sorted(set(options) - declared)
        if unknown:
            from app.errors import InvalidOptionError

            raise InvalidOptionError(
                f"unknown decode option {', '.join(unknown)} for {self.name}"
                + (f"; it takes {', '.join(sorted(declared))}" if declared else "")
            )
        return self

    @functools.cached_property
    def token_re(self) -> re.Pattern[str] | None:
        """:attr:`token_pattern` compiled (None when the scheme has none)."""
        return re.compile(self.token_pattern) if self.token_pattern else None

    @abc.abstractmethod
    def parse(self, text: str) -> int:
        """Parse any accepted text form strictly; return the packed integer.

        Raises :class:`~app.errors.InvalidIdError` whose message names the rule broken.
        """

    def format(self, value: int, fmt: str) -> str:
        """Text form ``fmt`` of a packed integer (InvalidOptionError for an unknown format). Default: through
        :attr:`text_forms`; a scheme without that table overrides this."""
        if self.text_forms is None:
            raise NotImplementedError(f"{self.name} declares no text_forms and formats nothing")
        return self.text_forms.format(value, fmt)

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

    time_order_options: ClassVar[dict[str, str]] = {}
    """The parameters of the reading :meth:`time_order` answers by default on the decode page and in /v1/schemes
    (eight-byte: ``{"mode": "time_sequential"}``, its only mode that sorts by time)."""

    time_order_takes: ClassVar[tuple[str, ...]] = ()
    """The parameters :meth:`time_order` reads (snowflake ``layout``, eight-byte ``mode``, TypeID ``type``), each the
    name of one of the scheme's :attr:`options` or :attr:`decode_options`; :func:`app.bounds.time_bounds` refuses
    any other before asking."""

    def time_order(self, options: Mapping[str, str]) -> TimeOrder:
        """How this scheme's stored IDs sort by time (:mod:`app.schemes.time_order`), read with ``options`` (the
        bounds route's scheme parameters: snowflake ``layout``, eight-byte ``mode``, TypeID ``type``). Raises
        :class:`~app.errors.InvalidOptionError` saying why when they do not (the default), or for an option it
        does not take."""
        from app.errors import InvalidOptionError

        raise InvalidOptionError(f"{self.name} IDs do not sort by time in any column type")

    def id_space_end_ns(self) -> int | None:
        """The first instant (ns since the Unix epoch) the scheme's timestamp cannot hold: from then on it issues
        nothing (uid-generator's default layout ran out in 2024). None for a scheme without time."""
        top = self.timestamp_native_max
        return None if top is None else round((top + 1) * self.native_unit_ns)

    def native_from_ns(self, ns: int) -> int:
        """Convert ns since the epoch to the native timestamp unit (floor)."""
        return int(ns // self.native_unit_ns)

    # -- backfill: IDs at past times ------------------------------------------------------------------------------

    backfills: ClassVar[bool] = False
    """True when the scheme can issue IDs at a given past time (:meth:`backfill_value`)."""
    backfill_identity: ClassVar[bool] = False
    """True when a back-dated ID takes a node identity and a per-tick sequence (snowflake, eight-byte): backfill then
    leases identities of the region's backfill reserve and keeps each (identity, tick)'s highest sequence in storage.
    False: random bits make a back-dated ID as unique as a live one."""
    timestamp_native_min: ClassVar[int] = 0
    """The earliest timestamp the ID can hold, in native units since the Unix epoch (the scheme's epoch)."""

    def backfill_tick(self, ns: int) -> int:
        """The native tick (the scheme's unit: ms, s, a snowflake layout's unit) holding instant ``ns`` (ns since the
        Unix epoch, floor). Raises InvalidOptionError naming the rule for a time before the scheme's epoch or past
        the end of its ID space."""
        from app.errors import InvalidOptionError
        from app.times import rfc3339

        tick = self.native_from_ns(ns)
        if tick < self.timestamp_native_min:
            epoch = rfc3339(round(self.timestamp_native_min * self.native_unit_ns), 3)
            raise InvalidOptionError(f"{self.name} IDs cannot hold a time before the scheme's epoch ({epoch})")
        top = self.timestamp_native_max
        if top is not None and tick > top:
            end = rfc3339(self.id_space_end_ns(), 3)
            raise InvalidOptionError(
                f"{self.name} IDs cannot hold a time past the end of the scheme's ID space (it ends at {end})"
            )
        return tick

    def backfill_sequences(self, settings: Any) -> int:
        """Sequences one identity holds per tick (2**S, 64) for a :attr:`backfill_identity` scheme."""
        raise NotImplementedError(f"{self.name} takes no identity when back-dated")

    def backfill_value(
        self, settings: Any, tick: int, identity: int, sequence: int, random: RandomSource, options: Mapping[str, Any]
    ) -> int:
        """The packed ID at native tick ``tick`` (from :meth:`backfill_tick`): with the node identity ``identity``
        and sequence ``sequence`` for a :attr:`backfill_identity` scheme (both 0 otherwise), else with fresh bits
        from ``random``; ``options`` as the issue routes parse them (kwarg -> value). Raises InvalidOptionError
        when the scheme does not back-date (the default)."""
        from app.errors import InvalidOptionError

        raise InvalidOptionError(f"{self.name} does not issue IDs at past times")
