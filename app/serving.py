"""The HTTP/1.1 connection layer of ``idmint serve``: uvicorn's httptools protocol, answering the hot routes itself
and bounding what uvicorn leaves unbounded.

**Hot routes from the connection layer.** A *simple* request for a hot route (``GET /v1/ids/{scheme}``,
``GET /v1/sequences/{name}/next``; see :class:`app.api.front.HotRoute`) is answered here, without an ASGI scope,
a task or receive/send coroutines: by the same :meth:`Front.answer_hot <app.api.front.Front.answer_hot>` the ASGI
front calls (the same handler, API-key check and quotas, drain gate and metrics), written in one
``transport.write`` with the same headers (:func:`app.api.front.reply_headers`, after uvicorn's ``date`` and
``server``). Simple means: ``GET`` over HTTP/1.1 (with ``Host``) or HTTP/1.0; no ``Content-Length``,
``Transfer-Encoding``, ``Expect`` or ``Upgrade``; no request of the connection still unanswered before it; the
transport accepting writes; one of the first :data:`ANSWERS_PER_READ` of its socket read; and the server run without
an access log, ``root_path`` or ``limit_concurrency`` (each of which only uvicorn's own path honours). Everything else
goes through ASGI to :class:`~app.api.front.Front`, as with any uvicorn protocol. A hot answer that must wait (a clock
behind its mark, a capped scheme's next tick, a batch encoded in a thread) goes on in a task, in order with the requests
pipelined behind it; nothing drawn is dropped.

**Bounds** uvicorn (0.54, read from its source) lacks: ``timeout_keep_alive`` closes a connection idle *after a
response*, the httptools protocol bounds neither headers nor their arrival, and a response whose client reads
nothing waits for ever. Here:

* **header size**: a request whose headers (request line and fields, counted as parsed) pass
  ``IDMINT_MAX_HEADER_BYTES`` is answered **431** and the connection closed, also while they are still arriving
  (then counted by the socket reads after the one they began in), so at most the limit plus one socket read is
  buffered for it;
* **header deadline**: a request's headers must be complete ``IDMINT_HEADER_TIMEOUT`` seconds after its first
  byte, else **408** and the connection is closed;
* **body deadline**: a request's body must be complete ``IDMINT_BODY_TIMEOUT`` seconds after its headers (while
  this layer reads it: not while it waits for the app to take what it has), else **408** (the app reading it sees
  the client gone) and the connection is closed;
* **connections per client**: a client address holding ``IDMINT_MAX_CONNECTIONS_PER_CLIENT`` connections open is
  answered **429** on the next one as it is accepted, which is then closed;
* **descriptor reserve**: client connections never take the file descriptors the node needs for its own files
  (high-water marks, state and lock files, backend connections): past the open-file limit (``RLIMIT_NOFILE``) less
  the descriptors open at the first connection and ``IDMINT_FD_RESERVE``, or when an accepted socket's descriptor
  lies inside the reserve (descriptors are handed out lowest first: every one below it is in use), a connection is
  answered **503** as it is accepted and closed at once;
* **request targets**: a target that is neither a path (``/...``) nor an absolute URL with one (``GET http://x``)
  is a **400** naming the rule;
* **idle connections**: a connection with no request under way (a fresh one too) is closed after
  ``IDMINT_KEEP_ALIVE_TIMEOUT`` seconds; one timer per connection, re-armed only when it fires early (never per
  request);
* **send timeout**: every response, batches and single answers as well as streams, must be taken by its client:
  while bytes of it wait in the transport (paused, or left over when it ended) and the client takes none of them for
  ``IDMINT_STREAM_SEND_TIMEOUT`` seconds, the connection is aborted, however it was to end (a graceful close waits
  for ever on a client that reads nothing); a stream then sees a disconnected client, ends, and frees its slot;
* **lingering close**: a connection closed while its client may still be sending (a body refused before it was
  read, a 431) is half-closed after the answer, and what the client still sends is read and dropped, at most
  :data:`LINGER_BYTES` for :data:`LINGER_SECONDS`, before the socket is closed, as nginx's ``lingering_close``:
  closing a socket with unread bytes resets it, and a client that writes its whole body before reading (Python's
  urllib) would see a broken pipe instead of its 413. A response that ends before its request's body was read
  closes the connection the same way, rather than reading an unbounded body to find the next request;
* **bad requests**: a request the parser refuses is a JSON **400** (after the answers to the requests before it,
  in order) and the connection is closed.

``idmint serve`` passes it to uvicorn as ``http="app.serving:BoundedHttpToolsProtocol"`` (an import string, so each
worker process builds its own); its limits come from the same ``IDMINT_*`` environment, read once per process. It
subclasses uvicorn's :class:`HttpToolsProtocol` and reads its internals: ``pyproject.toml`` pins uvicorn's minor
version, and ``tests/test_serving_internals.py`` fails when the parts used here move.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import json
import logging
import os
import resource
import socket
import struct
import termios
import time
import types
import urllib.parse
import weakref
from collections.abc import Coroutine, Generator
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from app.api.front import Front, Header, Reply, refused_by_framing
from app.api.params import MEMO_TEXT_BYTES
from app.api.streams import REQUEST_CYCLE

log = logging.getLogger("idmint.http")

PROTOCOL_IMPORT = "app.serving:BoundedHttpToolsProtocol"

LINGER_BYTES = 16 * 1024 * 1024
"""A lingering close reads and drops at most this many bytes (a refused 3 MB body is read; a 50 MB one is cut)."""
SEND_CHECKS = 10
"""Checks of a waiting answer per send timeout: a client that takes nothing is cut between one timeout and one
timeout and a tenth after it last took a byte (or after the answer was written)."""
PARSER_BAD_VERSION = "Invalid HTTP version"
"""httptools' (llhttp's) words for a request line whose HTTP version it does not read (``HTTP/1.2``, ``HTTP/3.0``):
it gives no error code, and no other error says them."""
LINGER_SECONDS = 5.0
"""A lingering close lasts at most this long (nginx: ``lingering_time``, 30 s; ``lingering_timeout``, 5 s)."""
WATCH_BYTES = 65_536
"""A hot answer's body at least this long is watched until its client took it (the send timeout): the kernel may
have taken it all at once."""
APART_BYTES = 8_192
"""A hot answer's body at least this long is handed to the transport beside its head (``writelines``: one ``writev``
under uvloop, uvicorn's default loop, not a copy into one buffer with it; asyncio's own transport joins them): a
``count=1000`` body is tens of kilobytes, whose copy costs more than the second iovec."""
ANSWERS_PER_READ = 32
"""At most this many requests of one socket read are answered inside its read callback (about 0.5 ms of work);
requests pipelined past them queue behind one another through ASGI, one per turn of the event loop, so a client
that pipelines thousands of requests in one write cannot hold the loop from every other client."""
DECLINED_HEADERS = frozenset((b"content-length", b"transfer-encoding", b"expect", b"upgrade"))
"""A request carrying any of these goes through ASGI (a body, an expectation, an upgrade)."""


REFUSAL_LOG_INTERVAL_S = 10.0
"""Connections refused as they are accepted are logged at most once per this many seconds (a flood of them is one
line, with its count)."""
TARGET_RULE = "the request target must be a path (/...) or an absolute URL with one (http://host/...)"


@dataclass(frozen=True)
class ConnectionLimits:
    """The per-connection bounds: ``max_header_bytes`` (bytes), ``header_timeout``, ``body_timeout``,
    ``send_timeout`` (seconds); and the per-process ones: ``max_connections_per_client``, ``max_connections`` (client
    connections open at once, None: no open-file limit), ``fd_reserve`` (descriptors)."""

    max_header_bytes: int
    header_timeout: float
    send_timeout: float
    body_timeout: float = 30.0
    max_connections_per_client: int = 256
    max_connections: int | None = None
    fd_reserve: int = 64
    fd_limit: int | None = None


def descriptors_open() -> int:
    """File descriptors this process holds (``/proc/self/fd``; 0 where there is none)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir held
    except OSError:
        return 0


def connection_cap(fd_reserve: int) -> tuple[int | None, int | None]:
    """(client connections this process may hold open, its open-file limit): the soft ``RLIMIT_NOFILE`` less the
    descriptors open now and ``fd_reserve``, at least 1; (None, None) without a limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None, None
    return max(1, soft - descriptors_open() - fd_reserve), soft


@functools.cache
def connection_limits() -> ConnectionLimits:
    """The limits of this process, from the ``IDMINT_*`` environment (validated by :func:`app.settings.load_settings`,
    which raises ConfigError), and its connection cap (:func:`connection_cap`), computed once, at its first
    connection."""
    from app.settings import load_settings

    settings = load_settings()
    cap, fd_limit = connection_cap(settings.fd_reserve)
    return ConnectionLimits(
        settings.max_header_bytes,
        settings.header_timeout,
        settings.stream_send_timeout,
        settings.body_timeout,
        settings.max_connections_per_client,
        cap,
        settings.fd_reserve,
        fd_limit,
    )


class OpenConnections:
    """The client connections this process holds open: in all (``total``) and per client address
    (``by_client``); and the refusals at accept not yet logged."""

    def __init__(self) -> None:
        self.total = 0
        self.by_client: dict[str, int] = {}
        self.refused_unlogged = 0
        self.logged_at = -REFUSAL_LOG_INTERVAL_S

    def opened(self, client: str) -> int:
        """Count a connection of ``client`` in; its client's connections now open."""
        self.total += 1
        count = self.by_client.get(client, 0) + 1
        self.by_client[client] = count
        return count

    def closed(self, client: str) -> None:
        self.total -= 1
        count = self.by_client[client] - 1
        if count:
            self.by_client[client] = count
        else:
            del self.by_client[client]

    def refused(self, now: float, reason: str) -> None:
        """Log a refusal at accept, at most one line per REFUSAL_LOG_INTERVAL_S (with the count since the last)."""
        self.refused_unlogged += 1
        if now - self.logged_at >= REFUSAL_LOG_INTERVAL_S:
            log.warning("%d connection(s) refused as accepted: %s", self.refused_unlogged, reason)
            self.refused_unlogged = 0
            self.logged_at = now


OPEN_CONNECTIONS = OpenConnections()
"""This process's client connections (one event loop per process: no lock)."""


def find_front(app: Any) -> Front | None:
    """The :class:`Front` inside uvicorn's loaded app (wrapped in its middlewares, each holding the next as
    ``.app``), or None (another app: then every request goes through ASGI)."""
    for _ in range(8):
        if isinstance(app, Front):
            return app
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def refusal_bytes(status: int, detail: str, default: bytes, retry_after: int | None = None) -> bytes:
    """A refusal written by the connection layer itself (400, 408, 429, 431, 503): JSON ``{"detail": ...}`` with
    uvicorn's ``default`` headers (:func:`default_head`) and ``Retry-After`` (seconds) when given, closing the
    connection."""
    body = json.dumps({"detail": detail}).encode()
    retry = b"" if retry_after is None else b"retry-after: %d\r\n" % retry_after
    return (
        b"%s%scontent-type: application/json\r\nx-content-type-options: nosniff\r\n%scontent-length: %d\r\n"
        b"connection: close\r\n\r\n%s" % (STATUS_LINE[status], default, retry, len(body), body)
    )


@functools.cache
def _fixed_head(fixed: tuple[Header, ...]) -> bytes:
    """The fixed headers of a reply (a few constants, :data:`app.api.front.JSON_HEADERS`), as written."""
    return b"".join(name + b": " + value + b"\r\n" for name, value in fixed)


@functools.lru_cache(maxsize=64)
def _reply_head(status: int, default: bytes, fixed: tuple[Header, ...]) -> bytes:
    """A hot answer's status line, uvicorn's ``default`` headers as written (:func:`default_head`: a new value once
    a second) and its fixed headers: the part of its head every answer of that status and route shares."""
    return STATUS_LINE[status] + default + _fixed_head(fixed)


class _ReplyHeads:
    """The heads of hot answers (:func:`_reply_head`) under uvicorn's current default headers (``source``: the list
    the server replaces once a second): ``by_reply[id(fixed) + status]`` is (fixed, status, head), trusted only for
    that very ``fixed`` object and status (a tuple's hash is computed afresh on every lookup; its identity is not)."""

    __slots__ = ("source", "by_reply")

    def __init__(self) -> None:
        self.source: object = None
        self.by_reply: dict[int, tuple[tuple[Header, ...], int, bytes]] = {}


_heads = _ReplyHeads()


HOT_TARGETS_MAX = 1024
"""Request targets :func:`_hot_target` remembers, each of at most :data:`~app.api.params.MEMO_TEXT_BYTES` (cleared
when full: endless distinct targets cost a re-parse, never memory)."""


def _hot_target(front: Front, url: bytes) -> tuple[Any, str, str, bytes, bytes] | None:
    """(hot route, its template parameter, path, raw path, query string) of a request target, or None when it is
    no hot route's (or has no path uvicorn reads), parsed and remembered per front and target of at most
    MEMO_TEXT_BYTES in ``front.hot_targets`` (the same bytes always parse the same; the caller looks there first)."""
    memo = front.hot_targets
    found: tuple[Any, str, str, bytes, bytes] | None = None
    try:
        parsed = httptools.parse_url(url)
        raw_path = parsed.path
        if raw_path is not None:  # an absolute URL without a path: refused (_target_ok)
            path = raw_path.decode("ascii")
            if "%" in path:
                path = urllib.parse.unquote(path)
            hot = front.hot_route("GET", path)
            if hot is not None:
                found = (hot[0], hot[1], path, raw_path, parsed.query or b"")
    except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
        pass
    if len(url) <= MEMO_TEXT_BYTES:
        if len(memo) >= HOT_TARGETS_MAX:
            memo.clear()
        memo[url] = found
    return found


_UNSEEN: Any = object()
"""A request target not (or no longer) in a front's memo of targets (``front.hot_targets``)."""

_default_head: tuple[object, bytes] = (None, b"")


def default_head(headers: list[Header]) -> bytes:
    """uvicorn's default headers (``date``, ``server``) as written; the server replaces the list once a second."""
    global _default_head
    source, written = _default_head
    if source is not headers:
        written = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
        _default_head = headers, written
    return written


@types.coroutine
def resumed(coro: Coroutine[Any, Any, Reply], pending: Any) -> Generator[Any, Any, Reply]:
    """Carry ``coro`` on inside a task after it was started by hand and first waited on ``pending`` (what its
    ``send(None)`` yielded): ``pending`` is handed to the task as if ``coro`` had yielded it there, then every
    step the task takes (a value sent, a cancellation thrown) goes to ``coro``."""
    while True:
        try:
            sent = yield pending
        except BaseException as exc:
            try:
                pending = coro.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                pending = coro.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


class _ClosingTransport:
    """The transport uvicorn's request cycles write to: its ``close()`` (uvicorn's, after an answer that says
    ``Connection: close``) is the protocol's :meth:`~BoundedHttpToolsProtocol.close_after_answer`."""

    __slots__ = ("protocol", "transport")

    def __init__(self, protocol: BoundedHttpToolsProtocol) -> None:
        self.protocol = protocol
        self.transport = protocol.transport

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.protocol.close_after_answer()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def unsent_bytes(transport: asyncio.Transport) -> int:
    """Bytes written to ``transport`` that its client has not taken: in the transport's buffer, and in the kernel's
    send queue (``SIOCOUTQ``: not yet sent, or sent and not yet acknowledged)."""
    size = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError, ValueError):
            size += struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    return size


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's :class:`HttpToolsProtocol` answering simple hot-route requests itself, with a header size limit
    (431), a header deadline (408), one idle timer per connection, a send timeout on every response, and a
    lingering close (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = connection_limits()
        # Only uvicorn's own path writes access lines and honours root_path and limit_concurrency.
        plain = not self.access_log and not self.root_path and self.limit_concurrency is None
        self.front = find_front(self.app) if plain else None
        self.in_headers = False  # between a request's first byte and the end of its headers
        self.header_bytes = 0  # bytes of the socket reads after the one the headers began in
        self.begin_read_bytes = 0  # size of the socket read the headers began in, once it is parsed (else 0)
        self.begun = 0  # requests begun on this connection
        self.cycle_begun = 0  # the value of begun when self.cycle was made: its request's number on this connection
        self.read_bytes = 0  # size of the socket read being parsed
        self.answered_in_read = 0  # requests of that read answered here
        self.refused = False  # answered 431/408/400, or closing: what the client sends is no longer parsed
        self.fast = False  # the request being parsed is answered here, not through ASGI
        self.message_complete = True  # the request being parsed has been read whole (its body too)
        self.idle_since: float | None = None  # loop time the connection last had no request under way
        self.closing = False  # closing gently: the answer is being taken, what the client sends is dropped
        self.drop_left = LINGER_BYTES
        self.header_timer: asyncio.TimerHandle | None = None
        self.body_timer: asyncio.TimerHandle | None = None
        self.peer: str | None = None  # the client address counted in OPEN_CONNECTIONS
        self.send_timer: asyncio.TimerHandle | None = None
        self.send_left = 0  # bytes not yet taken at the last check that saw the client take some
        self.send_progress_at = 0.0  # loop time of that check (or of arming the send timer)
        self.linger_timer: asyncio.TimerHandle | None = None
        self.running: RequestResponseCycle | None = None  # the request under way through ASGI or in a task
        self.cycle_transport: _ClosingTransport | None = None
        self.bad_request: tuple[int, str] | None = None  # bad bytes behind requests under way: the refusal after them

    # -- connection ---------------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.peer = peer = self.client[0] if self.client else ""
        count = OPEN_CONNECTIONS.opened(peer)
        limits = self.limits
        cap, fd_limit = limits.max_connections, limits.fd_limit
        sock = transport.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
        if (cap is not None and OPEN_CONNECTIONS.total > cap) or (
            fd_limit is not None and fd >= fd_limit - limits.fd_reserve
        ):
            reason = (
                f"this node holds all the connections it serves at once ({cap}: its open-file limit of {fd_limit} "
                f"less the descriptors it keeps for its own files, IDMINT_FD_RESERVE={limits.fd_reserve})"
            )
            self._refuse_at_accept(503, reason, gently=False)
            return
        if self.client and count > limits.max_connections_per_client:
            reason = (
                f"client {peer} already holds {count - 1} connections to this node "
                f"(at most {limits.max_connections_per_client}, IDMINT_MAX_CONNECTIONS_PER_CLIENT)"
            )
            self._refuse_at_accept(429, reason, gently=True)
            return
        self.idle_since = self.loop.time()
        self._arm_idle_timer(self.timeout_keep_alive)

    def _refuse_at_accept(self, status: int, reason: str, *, gently: bool) -> None:
        """Answer a connection just accepted ``status`` with ``reason`` before it sent anything, and close it: gently
        (the request it sends read and dropped, so it reads the answer), or at once (a descriptor is given back)."""
        OPEN_CONNECTIONS.refused(self.loop.time(), reason)
        self.refused = True
        self.transport.write(
            refusal_bytes(status, reason, default_head(self.server_state.default_headers), retry_after=1)
        )
        if gently:
            self._close_gently()
        else:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            OPEN_CONNECTIONS.closed(self.peer)
            self.peer = None
        self._disconnect()  # uvicorn's tells only the last request parsed, not the one under way before it
        self._cancel_header_timer()
        self._cancel_body_timer()
        self._cancel_send_timer()
        if self.linger_timer is not None:
            self.linger_timer.cancel()
            self.linger_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # uvicorn's data_received, without its per-read timer cancel (the idle timer stays armed; see _idle_check).
        # The hot path (a whole request in one read) pays for a few attribute reads here and no timer: the header
        # deadline is armed only when a read ends with the headers unfinished.
        if self.refused:
            if self.closing:
                self._drop(len(data))
            return
        continued = self.in_headers
        begun = self.begun
        self.read_bytes = len(data)
        self.answered_in_read = 0
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            if not self.refused:  # refused earlier in this read (a bad target): that answer stands, written once
                self._bad_request(exc)
            return
        if not self.in_headers:
            if not self.message_complete and self.body_timer is None and not self.refused:
                self.body_timer = self.loop.call_later(self.limits.body_timeout, self._body_timed_out)
            return
        if self.transport.is_closing():
            return
        if continued and self.begun == begun:  # the same request's headers, still arriving: count this read
            self.header_bytes += len(data)
        else:  # the headers began in this read (it may hold the end of the request before, too)
            self.begin_read_bytes = len(data)
        if max(self._parsed_header_bytes(), self.header_bytes) > self.limits.max_header_bytes:
            self._refuse_too_large()
        elif self.header_timer is None:
            self.header_timer = self.loop.call_later(self.limits.header_timeout, self._header_timed_out)

    def eof_received(self) -> bool | None:  # type: ignore[override]
        # uvicorn's returns None: the transport closes at once. A gentle close goes on while the answer is taken.
        if self.closing and unsent_bytes(self.transport):
            return True
        return None

    # -- parser callbacks ---------------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        # uvicorn's on_message_begin builds the ASGI scope here; a request answered here needs none, so it is built
        # (by uvicorn's own code, _begin_asgi) only for a request that goes through ASGI.
        if self.refused:
            return
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.in_headers = True
        self.begun += 1
        self.header_bytes = 0
        self.begin_read_bytes = 0
        self.fast = False
        self.message_complete = False
        self.idle_since = None

    def on_header(self, name: bytes, value: bytes) -> None:
        # uvicorn's, for the header section only: httptools also reports a chunked body's trailer fields here, which
        # uvicorn appended to the request's headers (the list its scope holds), so a trailer that came in the same
        # read as the headers passed for a second Authorization or Host and one that came later did not; trailers
        # are not header fields (RFC 9110 section 6.5.1), and no route reads any.
        if self.in_headers:
            name = name.lower()
            if name == b"expect" and value.lower() == b"100-continue":
                self.expect_100_continue = True
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        self.in_headers = False
        if self.header_timer is not None:
            self._cancel_header_timer()
        if (
            self.begin_read_bytes + self.header_bytes + self.read_bytes > self.limits.max_header_bytes
            and self._parsed_header_bytes() > self.limits.max_header_bytes
        ):
            self._refuse_too_large()
            return
        front = self.front
        if front is not None and self._answer_here(front):
            return
        if not self._target_ok():
            return
        self._begin_asgi()
        cycle = self.cycle
        super().on_headers_complete()
        if self.cycle is not cycle:  # not an upgrade (uvicorn hands those to its websocket protocol)
            self.cycle_begun = self.begun
            self.cycle.transport = self._cycle_transport()  # type: ignore[assignment]
            # A stream reads its disconnect; weakly held, as the cycle holds the scope.
            self.scope[REQUEST_CYCLE] = weakref.ref(self.cycle)  # type: ignore[literal-required]

    def on_body(self, body: bytes) -> None:
        if not self.refused and not self.fast:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self.refused:
            return
        self.message_complete = True
        if self.body_timer is not None:
            self._cancel_body_timer()
        if not self.fast:
            super().on_message_complete()

    def _begin_asgi(self) -> None:
        """uvicorn's on_message_begin (the ASGI scope), run once the request is known to go through ASGI."""
        url, headers, expect = self.url, self.headers, self.expect_100_continue
        HttpToolsProtocol.on_message_begin(self)
        self.url, self.expect_100_continue = url, expect
        self.headers = self.scope["headers"] = headers

    def _target_ok(self) -> bool:
        """Whether the request's target has a path uvicorn can read (origin or absolute form); else it is refused
        with 400 (after the requests before it) and False."""
        try:
            path = httptools.parse_url(self.url).path
        except httptools.HttpParserInvalidURLError:
            path = None
        if path is not None:
            return True
        shown = self.url[:200].decode("latin-1")
        self._refuse_in_order(400, f"{TARGET_RULE}, got {shown!r}")
        return False

    def _cycle_transport(self) -> _ClosingTransport:
        closing = self.cycle_transport
        if closing is None:
            closing = self.cycle_transport = _ClosingTransport(self)
        return closing

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        self.running = cycle
        super()._start_asgi_task(cycle, app)

    # -- hot routes ---------------------------------------------------------------------------------------------
    def _answer_here(self, front: Front) -> bool:
        """Answer the request whose headers are complete, when it is simple and for a hot route (see the module
        docstring). False: it goes through ASGI."""
        cycle = self.cycle
        if (cycle is not None and not cycle.response_complete) or self.flow.write_paused:
            return False
        if self.answered_in_read >= ANSWERS_PER_READ:
            return False
        parser = self.parser
        if parser.get_method() != b"GET":
            return False
        version = parser.get_http_version()
        if version != "1.1" and version != "1.0":
            return False
        host = False
        authorization = None
        for name, value in self.headers:
            if name in DECLINED_HEADERS:
                return False
            if name == b"host":
                if host:  # two: the ASGI front refuses them
                    return False
                host = True
            elif name == b"authorization":
                if authorization is not None:  # two: the key check refuses them (only_authorization)
                    return False
                authorization = value
        if not host and version == "1.1":
            return False
        url = self.url
        target = front.hot_targets.get(url, _UNSEEN)
        if target is _UNSEEN:
            target = _hot_target(front, url)
        if target is None:
            return False
        route, param, path, raw_path, query = target
        start = time.perf_counter()
        scope = {
            "type": "http",
            "http_version": version,
            "method": "GET",
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "headers": self.headers,
        }
        keep_alive = version == "1.1" and parser.should_keep_alive()
        self.fast = True
        self.answered_in_read += 1
        coro = front.answer_hot_now(route, param, scope, start, authorization)
        if isinstance(coro, tuple):
            self._answered(coro, keep_alive)
            return True
        try:
            pending = coro.send(None)
        except StopIteration as done:
            self._answered(done.value, keep_alive)
            return True
        # It waits: a task carries it on, as the request under way that later ones queue behind (uvicorn's
        # pipeline), and writes its answer when it has one.
        self.cycle_begun = self.begun
        self.cycle = self.running = cycle = RequestResponseCycle(
            scope=scope,  # type: ignore[arg-type]
            transport=self._cycle_transport(),  # type: ignore[arg-type]
            flow=self.flow,
            logger=self.logger,
            access_logger=self.access_logger,
            access_log=self.access_log,
            default_headers=self.server_state.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=False,
            keep_alive=keep_alive,
            on_response=self.on_response_complete,
        )
        task = self.loop.create_task(self._answer_later(cycle, coro, pending))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
        return True

    async def _answer_later(self, cycle: RequestResponseCycle, coro: Coroutine[Any, Any, Reply], pending: Any) -> None:
        try:
            reply = await resumed(coro, pending)
            if not cycle.disconnected and self.flow.write_paused:
                await self.flow.drain()
        except BaseException:
            if not cycle.disconnected:
                self.transport.close()  # the server is stopping (cancelled): no answer, no further request
            raise
        if cycle.disconnected:
            return
        cycle.response_started = cycle.response_complete = True
        cycle.message_event.set()
        self._answered(reply, cycle.keep_alive, later=True)
        self.on_response_complete()  # the next request pipelined behind it, or idle

    def _answered(self, reply: Reply, keep_alive: bool, later: bool = False) -> None:
        """Write a hot answer in one transport write: the bytes uvicorn writes for the same ASGI messages (status
        line, its default headers, :func:`~app.api.front.reply_headers`, ``connection: close`` when the connection
        ends), so either transport answers the same. Then count it, close or go idle, and watch a large answer (or
        one the transport could not send at once) until its client took it. ``later``: written from its task
        (:meth:`_answer_later`), where requests may be pipelined behind it: then :meth:`on_response_complete` says
        whether the connection is idle (it is not while they are answered)."""
        status, fixed, extra, body = reply
        default = self.server_state.default_headers
        heads = _heads
        if heads.source is not default:
            heads.source, heads.by_reply = default, {}
        known = heads.by_reply.get(id(fixed) + status)
        if known is not None and known[0] is fixed and known[1] == status:
            start = known[2]
        else:
            start = _reply_head(status, default_head(default), fixed)
            heads.by_reply[id(fixed) + status] = fixed, status, start
        end = b"\r\n" if keep_alive else b"connection: close\r\n\r\n"
        transport = self.transport
        size = len(body)
        if not extra:  # the common answer: one formatting, one write (a large body beside its head)
            if size < APART_BYTES:
                transport.write(b"%scontent-length: %d\r\n%s%s" % (start, size, end, body))
            else:
                transport.writelines((b"%scontent-length: %d\r\n%s" % (start, size, end), body))
        else:
            head = [start]
            for name, value in extra:
                head += (name, b": ", value, b"\r\n")
            head.append(b"content-length: %d\r\n" % size)
            head.append(end)
            if size < APART_BYTES:
                head.append(body)
                transport.write(b"".join(head))
            else:
                transport.writelines((b"".join(head), body))
        if self.running is not None and self.running.response_complete:
            self.running = None
        self.server_state.total_requests += 1
        watch = size >= WATCH_BYTES or transport.get_write_buffer_size()
        if not keep_alive:
            if watch:
                self.close_after_answer()
            else:
                transport.close()
            return
        if not later:
            self.idle_since = self.loop.time()
            if self.timeout_keep_alive_task is None:
                self._arm_idle_timer(self.timeout_keep_alive)
        if watch:
            self._watch_send()

    def on_response_complete(self) -> None:
        # uvicorn's, with the idle timer kept (not re-armed per request), the send watched until the client took
        # the answer, a connection whose request body was not read closed (gently), not read on, and the 400 of
        # bad bytes pipelined behind answers written after the last of them.
        self.server_state.total_requests += 1
        transport = self.transport
        if transport.is_closing() or self.closing:
            return
        if unsent_bytes(transport):
            self._watch_send()
        if self.bad_request is not None:
            if self.pipeline:
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
            else:
                self._refuse(*self.bad_request)
            return
        if not self.message_complete and not self.in_headers and not self.pipeline:
            self.close_after_answer()  # the request's body is still arriving, unread
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        elif not self.in_headers:
            self.idle_since = self.loop.time()
            if self.timeout_keep_alive_task is None:
                self._arm_idle_timer(self.timeout_keep_alive)

    def shutdown(self) -> None:
        if self.closing:
            self.transport.close()
            return
        super().shutdown()

    # -- closing ------------------------------------------------------------------------------------------------
    def close_after_answer(self) -> None:
        """Close once the answer is written: at once when the client has taken it and sent nothing unread, else
        gently (:meth:`_close_gently`)."""
        if self.closing:
            return
        transport = self.transport
        if (self.message_complete or transport.is_closing()) and not unsent_bytes(transport):
            transport.close()
            return
        self._close_gently()

    def _close_gently(self) -> None:
        """Half-close after the answer (its end, then the end of the stream), keep reading and dropping what the
        client sends (at most LINGER_BYTES), and close the socket once the client has taken every byte (or stops
        taking them: the send timeout aborts it) and LINGER_SECONDS have passed, or the client closes its end."""
        transport = self.transport
        if self.closing or transport.is_closing():
            return
        self.refused = self.closing = True
        self.in_headers = False
        self._cancel_header_timer()
        self.flow.resume_reading()  # uvicorn pauses reading while a body waits for its app
        if transport.can_write_eof():
            transport.write_eof()
        self.linger_timer = self.loop.call_later(LINGER_SECONDS, self._linger_check)
        self._watch_send()

    def _drop(self, size: int) -> None:
        self.drop_left -= size
        if self.drop_left < 0:
            self._abort()

    def _linger_check(self) -> None:
        self.linger_timer = None
        if self.transport.is_closing():
            return
        if unsent_bytes(self.transport):  # still being taken: the send timeout judges it
            self.linger_timer = self.loop.call_later(LINGER_SECONDS, self._linger_check)
        else:
            self.transport.close()

    # -- refusals -----------------------------------------------------------------------------------------------
    def _parsed_header_bytes(self) -> int:
        """The request line's target and the header fields parsed so far, with their separators."""
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _refuse_too_large(self) -> None:
        self._refuse(
            431, f"request headers must be at most {self.limits.max_header_bytes} bytes (IDMINT_MAX_HEADER_BYTES)"
        )

    def _bad_request(self, exc: Exception) -> None:
        """Refuse bytes the parser could not read: a 505 when it was the HTTP version (llhttp reads only 0.9, 1.0,
        1.1 and 2.0; the ASGI front answers those it does not speak with the same words), else a 400."""
        self.logger.warning("Invalid HTTP request received.")
        status, detail = 400, f"invalid HTTP request: {exc}"
        if str(exc) == PARSER_BAD_VERSION:
            status, detail = 505, "this HTTP version is not supported: this server speaks HTTP/1.1 (and HTTP/1.0)"
        self._refuse_in_order(status, detail)

    def _refuse_in_order(self, status: int, detail: str) -> None:
        """Refuse the request being parsed with ``status``: at once when none is under way before it, else after the
        answers to those (on_response_complete), and close."""
        if self._between_requests() or self.transport.is_closing():
            self._refuse(status, detail)
            return
        cycle = self.cycle
        if (
            cycle is not None
            and self.cycle_begun == self.begun
            and not self.message_complete
            and not self.in_headers
            and not refused_by_framing(self.parser.get_http_version(), self.headers)
        ):
            # The bad bytes are in the body of the request parsed last, whose cycle this is (not an earlier one's: a
            # bad target refuses a request that has none), which can never be complete now (unless the front
            # refuses it by its framing, a 501 for Transfer-Encoding: xchunked: its answer reads no body).
            if not (self.pipeline and self.pipeline[0][0] is cycle):
                self._refuse_under_way(status, detail)  # its app is reading the body: it must not wait for ever
                return
            # Queued behind the answers before it, never started: the 400 takes its place, after them.
            self.pipeline.popleft()
            previous = self.pipeline[0][0] if self.pipeline else self.running
            if previous is not None:
                self.cycle = previous
        # Requests before it are under way: the 400 follows their answers (on_response_complete), in order.
        self.refused = True
        self.in_headers = False
        self._cancel_header_timer()
        self.flow.pause_reading()  # nothing after the bad bytes is read, let alone parsed
        self.bad_request = (status, detail)

    def _refuse_under_way(self, status: int, detail: str) -> None:
        """Refuse the request under way whose body broke off (bad bytes, or not in time): its app, reading the body,
        sees the client gone; the client gets ``status`` and a gentle close when its answer has not begun, else the
        connection is reset."""
        cycle = self.cycle
        self.refused = True
        self.in_headers = False
        self._cancel_header_timer()
        self._cancel_body_timer()
        self._disconnect()
        if cycle is not None and not cycle.response_started:
            self.transport.write(refusal_bytes(status, detail, default_head(self.server_state.default_headers)))
            self._close_gently()
        else:
            self._abort()

    def _refuse(self, status: int, detail: str) -> None:
        """Answer ``status`` and close (gently), or just close when a response is under way (pipelining)."""
        self.refused = True
        self.in_headers = False
        self._cancel_header_timer()
        if self._between_requests():
            self.transport.write(refusal_bytes(status, detail, default_head(self.server_state.default_headers)))
            self._close_gently()
        else:
            self._abort()

    def _abort(self) -> None:
        """Reset the connection (``SO_LINGER`` 0: the kernel drops what it still holds for the client, too), the
        responses under way told first: the transport wakes a writer waiting for it to drain before it reports the
        loss, and that writer must not write to a closed transport."""
        self._disconnect()
        transport = self.transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    def _disconnect(self) -> None:
        for cycle in (self.running, self.cycle):
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()

    # -- write flow control -------------------------------------------------------------------------------------
    def pause_writing(self) -> None:
        super().pause_writing()
        self._cancel_send_timer()
        self._watch_send()

    def resume_writing(self) -> None:
        self._cancel_send_timer()
        super().resume_writing()

    # -- timers -------------------------------------------------------------------------------------------------
    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_idle_timer(self, delay: float) -> None:
        # uvicorn's attribute: its connection_lost cancels it.
        self.timeout_keep_alive_task = self.loop.call_later(delay, self._idle_check)

    def _idle_check(self) -> None:
        """The one idle timer fired: close the connection if it has been idle for the keep-alive timeout, else arm
        it for the time left (a request came and went since it was armed) or leave it to the next answer's end (a
        request is under way)."""
        self.timeout_keep_alive_task = None
        since = self.idle_since
        if self.transport.is_closing() or self.closing or since is None or self.in_headers:
            return
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._arm_idle_timer(left)
        else:
            self.close_after_answer()

    def _watch_send(self) -> None:
        if self.send_timer is None:
            self.send_left = unsent_bytes(self.transport)
            self.send_progress_at = self.loop.time()
            self.send_timer = self.loop.call_later(self.limits.send_timeout / SEND_CHECKS, self._send_check)

    def _cancel_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _cancel_body_timer(self) -> None:
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None

    def _cancel_send_timer(self) -> None:
        if self.send_timer is not None:
            self.send_timer.cancel()
            self.send_timer = None

    def _header_timed_out(self) -> None:
        self.header_timer = None
        if self.transport.is_closing() or not self.in_headers:
            return
        if not self._between_requests():  # a pipelined request waits for the response before it: so do we
            self.header_timer = self.loop.call_later(self.limits.header_timeout, self._header_timed_out)
            return
        timeout = self.limits.header_timeout
        self._refuse(408, f"request headers must arrive within {timeout:g} s (IDMINT_HEADER_TIMEOUT)")

    def _body_timed_out(self) -> None:
        """The body deadline passed: 408 and close when the request's answer has not begun (its app, reading the
        body, sees the client gone), else reset the connection. Re-armed while this layer does not read (the app
        has not taken what arrived, or a request before it is answered)."""
        self.body_timer = None
        if self.transport.is_closing() or self.closing or self.refused or self.message_complete:
            return
        timeout = self.limits.body_timeout
        if self.flow.read_paused:
            self.body_timer = self.loop.call_later(timeout, self._body_timed_out)
            return
        detail = f"the request body must arrive within {timeout:g} s of its headers (IDMINT_BODY_TIMEOUT)"
        self._refuse_under_way(408, detail)

    def _send_check(self) -> None:
        """The send timer fired (every send timeout / SEND_CHECKS while bytes wait): abort the connection when its
        client has taken none of the bytes waiting for it for a whole send timeout, else watch on (it takes them,
        however slowly). Checked in steps, not once per timeout: the kernels take a first window of bytes into
        their buffers just after an answer is written, and a single check a timeout later counted that as the
        client reading, so an unread answer was cut only after a second timeout."""
        self.send_timer = None
        left = unsent_bytes(self.transport)
        if not left:
            if self.closing:
                self.transport.close()
            return
        now = self.loop.time()
        if left < self.send_left:
            self.send_left, self.send_progress_at = left, now
        waited = now - self.send_progress_at
        if waited < self.limits.send_timeout:
            step = min(self.limits.send_timeout / SEND_CHECKS, self.limits.send_timeout - waited)
            self.send_timer = self.loop.call_later(step, self._send_check)
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "client"
        cycle = self.running or self.cycle
        path = cycle.scope.get("path", "") if cycle is not None else ""
        log.info(
            "%s accepted no bytes of %s for %g s (IDMINT_STREAM_SEND_TIMEOUT): connection closed",
            client,
            path or "a response",
            self.limits.send_timeout,
        )
        self._abort()  # close() would wait to flush what the client does not read
