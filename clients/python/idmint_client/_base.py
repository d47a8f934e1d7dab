"""What both clients share: settings, request building, answer parsing, buffers keyed by (scheme, options, format),
and fork safety. The I/O lives in :mod:`idmint_client._async_client` (and :mod:`idmint_client._client`, generated
from it)."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from idmint_client._buffer import Buffer
from idmint_client._exceptions import ValidationError
from idmint_client._fleet import FleetCheck
from idmint_client._models import BufferStats, SchemeInfo
from idmint_client._public import PUBLIC_FORMAT
from idmint_client._repeats import Repeats, Rule
from idmint_client._replicas import Failed, ReplicaSet, count_range, normalise_urls
from idmint_client._sequences import SequenceRange
from idmint_client._shapes import IdShape, missing_shape

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MAX_AGE_S = 1.0
DEFAULT_MIN_REFILL = 64
DEFAULT_MAX_REFILL = 100_000
"""The server's default IDMINT_MAX_COUNT; a smaller server limit is learned and honoured."""
MAX_LINE_CHARS = 4096
"""A stream line longer than this is no ID when the catalogue gives no ``max_lengths`` for its form (an older
server): the answer fails (its text is not buffered without bound)."""
FRAMING_BYTES = 4096
"""What a batch answer may hold besides its IDs' texts (the JSON around them, a scheme's extra fields)."""
MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""The longest answer read from any route but the issuing ones (the catalogue, decode, sequences)."""

Key = str | tuple[str, str | None, tuple[tuple[str, str], ...]]
"""A buffer's key: the bare scheme name (no options, canonical format: the common case, cheapest to build) or
(scheme, format, sorted options)."""

LockT = TypeVar("LockT")
TransportT = TypeVar("TransportT")
T = TypeVar("T")


FLEET_PATH = "/v1/fleet"
"""Where a server tells its fleet (read once per server before it is used)."""


def buffer_key(scheme: str, fmt: str | None, options: Mapping[str, object]) -> Key:
    if not options and fmt is None:
        return scheme
    return (scheme, fmt, tuple(sorted((k, str(v)) for k, v in options.items())))


def issue_path(scheme: str, stream: bool = False) -> str:
    return f"/v1/ids/{quote(scheme, safe='')}" + ("/stream" if stream else "")


def decode_path(id_text: str, scheme: str | None) -> str:
    if scheme is None:
        return f"/v1/decode/{quote(id_text, safe='')}"
    return f"/v1/decode/{quote(scheme, safe='')}/{quote(id_text, safe='')}"


def issue_params(count: int, fmt: str | None, options: Mapping[str, object]) -> dict[str, str]:
    params = {"count": str(count)}
    if fmt is not None:
        params["format"] = fmt
    for name, value in options.items():
        params[name] = str(value)
    return params


def batch_limit(count: int, shape: IdShape) -> int:
    """The most bytes a batch answer of ``count`` IDs of ``shape`` can need: each ID's longest text, quoted and
    comma-separated, plus FRAMING_BYTES."""
    return count * (shape.longest + 3) + FRAMING_BYTES


def too_long(size: int, limit: int) -> Failed:
    return Failed(f"answer is longer than the {limit} bytes it can need ({size} bytes or more): refused unread")


def bounded(response: httpx.Response, content: bytes) -> httpx.Response:
    """A response of ``content`` (read within its bound) with ``response``'s status, headers and request."""
    headers = [(k, v) for k, v in response.headers.items() if k != "content-encoding"]  # decoded already
    return httpx.Response(response.status_code, headers=headers, content=content, request=response.request)


def declared_length(response: httpx.Response, limit: int) -> None:
    """Failed when ``response`` declares a Content-Length over ``limit`` (nothing of it is read)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_long(int(declared), limit)


def parse_ids(
    response: httpx.Response, count: int, shape: IdShape, repeats: Repeats, key: Key, rising: bool | Rule = False
) -> list[str]:
    """The ``ids`` of a batch answer, each checked against ``shape``, for repeats (:mod:`idmint_client._repeats`,
    under ``key``) and, when ``rising``, for strictly rising order; Failed when the answer is not what the API
    promises (naming the first ID that is not one)."""
    try:
        data = response.json()
        ids = data["ids"]
        label = (data.get("scheme"), data.get("format"))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise Failed(f"unreadable batch answer: {exc!r}") from exc
    if shape.missing is None and label != (shape.scheme, shape.format):
        raise Failed(
            f"answer is labelled scheme {label[0]!r} format {label[1]!r}, "
            f"asked scheme {shape.scheme!r} format {shape.format!r}"
        )
    if not isinstance(ids, list) or len(ids) != count:
        raise Failed(f"batch answer holds {len(ids) if isinstance(ids, list) else '?'} IDs, asked for {count}")
    shape.check_ids(ids)
    repeats.check(key, ids, rising=rising)
    return ids


def _per_identity(raw: Mapping[str, object], form: str | None) -> object:
    """``form``'s entry of a catalogue entry's ``rising_per_identity`` (None when it has none)."""
    declared = raw.get("rising_per_identity")
    return declared.get(form) if isinstance(declared, dict) and form else None


def ordered_reasons(urls: tuple[str, ...], reasons: Mapping[str, str]) -> dict[str, str]:
    """Each of ``urls`` (in the client's order) with its reason from ``reasons`` (``not tried`` when it has none)."""
    return {u: reasons.get(u, "not tried") for u in urls}


def guarded(parse: Callable[[httpx.Response], T]) -> Callable[[httpx.Response], T]:
    """``parse`` with malformed answers turned into Failed (move on to another replica)."""

    def run(response: httpx.Response) -> T:
        try:
            return parse(response)
        except (ValueError, KeyError, TypeError) as exc:
            raise Failed(f"unreadable answer: {exc!r}") from exc

    return run


def check_stream_type(response: httpx.Response) -> None:
    """Failed unless a stream answer is ``text/plain`` (an HTML error page of a proxy is not a stream of IDs)."""
    kind = response.headers.get("content-type", "")
    if not kind.startswith("text/plain"):
        raise Failed(f"stream answer is {kind or 'untyped'!r}, not text/plain")


def split_lines(partial: str, chunk: bytes, shape: IdShape, line: int) -> tuple[list[str], str]:
    """Complete lines of ``partial + chunk``, checked against ``shape`` (the first being line ``line`` of the
    answer), and the incomplete rest (kept until more arrives, or discarded). Raises Failed for text that is not
    ASCII, a line that is not an ID of the shape, or a line longer than the shape's longest ID."""
    try:
        text = partial + chunk.decode("ascii")
    except UnicodeDecodeError as exc:
        raise Failed(f"stream is not ASCII text: {exc}") from exc
    cut = text.rfind("\n")
    if len(text) - cut - 1 > shape.longest:
        number = line + text.count("\n")
        raise Failed(f"line {number} is longer than {shape.longest} characters, the longest ID: refused unread")
    if cut < 0:
        return [], text
    complete = text[:cut]
    shape.check_text(complete, line)
    return complete.split("\n"), text[cut + 1 :]


class BaseClient(Generic[LockT, TransportT]):
    """Settings, replicas, buffers and fork safety. Subclasses add the I/O (``TransportT``: their httpx
    transport type)."""

    _http: Any

    def __init__(
        self,
        replicas: str | Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        api_key: str | None = None,
        max_age: float | None = DEFAULT_MAX_AGE_S,
        buffer: bool = True,
        min_refill: int = DEFAULT_MIN_REFILL,
        max_refill: int = DEFAULT_MAX_REFILL,
        transport: TransportT | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if max_age is not None and max_age <= 0:
            raise ValueError(f"max_age must be > 0 seconds or None, got {max_age}")
        if not 1 <= min_refill <= max_refill:
            raise ValueError(
                f"refill bounds must satisfy 1 <= min_refill <= max_refill, got {min_refill}, {max_refill}"
            )
        self.urls = normalise_urls(replicas)
        self.timeout = timeout
        self.max_age = max_age
        self.buffered = buffer
        self.min_refill = min_refill
        self.max_refill = max_refill
        self._api_key = api_key
        self._transport = transport
        self._closed = False
        self._max_count: int | None = None
        """The server's max batch count, once learned (/v1/schemes or a 422 naming the count range)."""
        self._catalogue: dict[str, SchemeInfo] = {}
        """The fleet's schemes by name, once fetched (/v1/schemes): their token patterns check every answer."""
        self._shapes: dict[tuple[str, str | None], IdShape] = {}
        self._repeats = Repeats()
        """The ends of recent answers: an answer repeating one fails its server (never an ID handed out twice)."""
        self._fresh_state()
        ref = weakref.ref(self)

        def after_fork_in_child() -> None:
            client = ref()
            if client is not None:
                client._fresh_state()

        # The child of os.fork() starts with empty buffers, new locks and new connections: a buffered ID is never
        # handed out by two processes, and no socket is shared. Cheaper than a getpid() check on every new_id().
        os.register_at_fork(after_in_child=after_fork_in_child)

    def _fresh_state(self) -> None:
        """Empty buffers, new locks, a new HTTP connection pool (at start, and in the child after a fork)."""
        self.pid = os.getpid()
        self._replicas = ReplicaSet(self.urls)
        self._heads: dict[Key, tuple[float, Callable[[], str]]] = {}
        """key -> (deadline, next) of the buffer's head segment: all the hot path reads."""
        self._buffers: dict[Key, Buffer] = {}
        self._locks: dict[Key, LockT] = {}
        self._meta_lock = threading.Lock()
        """Held while a buffer and its lock are made (the async client's is never contended: no await inside)."""
        self._fleets = FleetCheck()
        """Each server's fleet, read before the server is first used (servers of overlapping fleets: an error)."""
        self._http = self._make_http()

    def _headers(self) -> dict[str, str]:
        headers = {"user-agent": "idmint-client/0.1"}
        if self._api_key is not None:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    def _make_http(self) -> Any:
        raise NotImplementedError

    def _new_buffer(self, scheme: str, fmt: str | None, options: Mapping[str, object]) -> Buffer:
        return Buffer(
            scheme,
            {k: str(v) for k, v in options.items()},
            fmt,
            self.min_refill,
            self.max_refill,
            self.max_age,
            time.monotonic(),
        )

    def _learn(self, infos: list[SchemeInfo]) -> None:
        counts = [i.max_count for i in infos if i.max_count]
        if counts:
            self._max_count = min(counts)
        self._catalogue = {i.name: i for i in infos}
        self._shapes = {}

    def _known_shape(self, scheme: str, fmt: str | None) -> IdShape | None:
        """The shape of ``scheme``'s IDs in form ``fmt`` (None: canonical) from the catalogue; None when the
        catalogue does not know the scheme (fetch it, then ask :meth:`_shape_after_fetch`)."""
        shape = self._shapes.get((scheme, fmt))
        if shape is None and scheme in self._catalogue:
            shape = self._shape_after_fetch(scheme, fmt)
        return shape

    def _shape_after_fetch(self, scheme: str, fmt: str | None) -> IdShape:
        """As :meth:`_known_shape`, after a fresh catalogue: a scheme or format it lacks gets a shape that fails
        every answer (the server answers 404 or 422 first, as it should)."""
        info = self._catalogue.get(scheme)
        if info is None:
            return missing_shape(scheme, fmt)
        form = fmt if fmt is not None else info.canonical_format
        keyed = form == PUBLIC_FORMAT  # public IDs keep no order and are no integers: the recent-ID rule only
        shape = IdShape(
            scheme,
            form or "canonical",
            info.token_patterns.get(form) if form else None,
            info.rising.get(form) if form and not keyed else None,
            None if keyed else _per_identity(info.raw, form),
            longest=info.max_lengths.get(form, MAX_LINE_CHARS) if form else MAX_LINE_CHARS,
        )
        self._shapes[(scheme, fmt)] = shape
        return shape

    def _learn_from(self, exc: ValidationError, count: int) -> int | None:
        """The max count named by a count-range 422, when splitting would help; None otherwise."""
        maximum = count_range(exc)
        if maximum is not None and 1 <= maximum < count:
            self._max_count = maximum
            return maximum
        return None

    def _checked_range(self, found: SequenceRange) -> SequenceRange:
        """A ``range`` answer that overlaps no range (nor ``next`` answer) received before; Failed otherwise."""
        self._repeats.check_range(found.name, found.first, found.last)
        return found

    def stats(self) -> list[BufferStats]:
        """The state of every ``new_id`` buffer of this process (sizes, refills, IDs discarded as expired)."""
        return [b.stats(self._max_count) for b in list(self._buffers.values())]
