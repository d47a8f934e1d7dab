"""app/serving.py subclasses uvicorn's httptools protocol and reads its internals (house style 16): this pins what it
stands on. uvicorn must be of the minor range pyproject.toml names, and the source of every uvicorn function the
connection layer overrides, calls, or writes the same bytes as must be the source it was written against: a new
uvicorn release that moves one fails here, naming it. Then re-read app/serving.py against the new code, and record
the new digests (``python -m tests.test_serving_internals`` prints them)."""

from __future__ import annotations

import hashlib
import inspect
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httptools
import uvicorn
from packaging.requirements import Requirement
from packaging.version import Version
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http import flow_control, httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from app.serving import BoundedHttpToolsProtocol, ConnectionLimits

ROOT = Path(__file__).resolve().parents[1]

READ: dict[str, Callable[..., Any] | type] = {
    # Overridden (the connection layer's version replaces or wraps uvicorn's).
    "HttpToolsProtocol.__init__": HttpToolsProtocol.__init__,
    "HttpToolsProtocol.connection_made": HttpToolsProtocol.connection_made,
    "HttpToolsProtocol.connection_lost": HttpToolsProtocol.connection_lost,
    "HttpToolsProtocol.data_received": HttpToolsProtocol.data_received,
    "HttpToolsProtocol.eof_received": HttpToolsProtocol.eof_received,
    "HttpToolsProtocol.on_message_begin": HttpToolsProtocol.on_message_begin,
    "HttpToolsProtocol.on_headers_complete": HttpToolsProtocol.on_headers_complete,
    "HttpToolsProtocol.on_body": HttpToolsProtocol.on_body,
    "HttpToolsProtocol.on_message_complete": HttpToolsProtocol.on_message_complete,
    "HttpToolsProtocol.on_response_complete": HttpToolsProtocol.on_response_complete,
    "HttpToolsProtocol._start_asgi_task": HttpToolsProtocol._start_asgi_task,
    "HttpToolsProtocol.shutdown": HttpToolsProtocol.shutdown,
    "HttpToolsProtocol.pause_writing": HttpToolsProtocol.pause_writing,
    "HttpToolsProtocol.resume_writing": HttpToolsProtocol.resume_writing,
    # Called or relied on as they are.
    "HttpToolsProtocol.on_url": HttpToolsProtocol.on_url,
    "HttpToolsProtocol.on_header": HttpToolsProtocol.on_header,
    "HttpToolsProtocol._should_upgrade": HttpToolsProtocol._should_upgrade,
    "HttpToolsProtocol.handle_websocket_upgrade": HttpToolsProtocol.handle_websocket_upgrade,
    "HttpToolsProtocol._unsupported_upgrade_warning": HttpToolsProtocol._unsupported_upgrade_warning,
    "HttpToolsProtocol._unset_keepalive_if_required": HttpToolsProtocol._unset_keepalive_if_required,
    "RequestResponseCycle.__init__": RequestResponseCycle.__init__,
    "RequestResponseCycle.run_asgi": RequestResponseCycle.run_asgi,
    "RequestResponseCycle.receive": RequestResponseCycle.receive,
    "FlowControl": flow_control.FlowControl,
    "ProxyHeadersMiddleware.__init__": ProxyHeadersMiddleware.__init__,
    # The bytes a hot answer must equal: uvicorn's status line and its header writing.
    "_get_status_line": httptools_impl._get_status_line,
    "RequestResponseCycle.send": RequestResponseCycle.send,
}

DIGESTS = {
    "HttpToolsProtocol.__init__": "4f08999410347141",
    "HttpToolsProtocol.connection_made": "6efb565ff3d36b91",
    "HttpToolsProtocol.connection_lost": "c91a4c9bf2e29c55",
    "HttpToolsProtocol.data_received": "010a7ae59a5d3b1a",
    "HttpToolsProtocol.eof_received": "5652627579a02369",
    "HttpToolsProtocol.on_message_begin": "96d377fdc7c2baef",
    "HttpToolsProtocol.on_headers_complete": "1ea8589acfad92d8",
    "HttpToolsProtocol.on_body": "dba9c32aeba35b6a",
    "HttpToolsProtocol.on_message_complete": "1fbad42dc31fc01f",
    "HttpToolsProtocol.on_response_complete": "64e254f28e389e76",
    "HttpToolsProtocol._start_asgi_task": "9c08c2571ae9b038",
    "HttpToolsProtocol.shutdown": "d7351fa33f00d430",
    "HttpToolsProtocol.pause_writing": "17a8fd215d96a13c",
    "HttpToolsProtocol.resume_writing": "7844bbaa8cceb1ef",
    "HttpToolsProtocol.on_url": "37be44e962b04ca8",
    "HttpToolsProtocol.on_header": "65d62c044f61fdbd",
    "HttpToolsProtocol._should_upgrade": "8fcad1ab8e096739",
    "HttpToolsProtocol.handle_websocket_upgrade": "179c4f769386ab89",
    "HttpToolsProtocol._unsupported_upgrade_warning": "55bbd2762b189d9a",
    "HttpToolsProtocol._unset_keepalive_if_required": "00a6a4e47214e68e",
    "RequestResponseCycle.__init__": "4d2f220910c33c12",
    "RequestResponseCycle.run_asgi": "0f33f2449a444bc2",
    "RequestResponseCycle.receive": "8124ae006be71184",
    "FlowControl": "126debcdaa894c83",
    "ProxyHeadersMiddleware.__init__": "7aa920bbc1fa565f",
    "_get_status_line": "d7012e110d2d2574",
    "RequestResponseCycle.send": "abdd8601b326a8da",
}
"""SHA-256 (first 16 hex digits) of each one's source, as uvicorn 0.54.0 has it."""


def digest(thing: Callable[..., Any] | type) -> str:
    return hashlib.sha256(inspect.getsource(thing).encode()).hexdigest()[:16]


def test_uvicorn_is_the_minor_release_pyproject_names() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [pinned] = [Requirement(text) for text in dependencies if Requirement(text).name == "uvicorn"]
    assert pinned.specifier.contains(uvicorn.__version__), (uvicorn.__version__, str(pinned))
    lowest = min(Version(spec.version) for spec in pinned.specifier if spec.operator == ">=")
    highest = min(Version(spec.version) for spec in pinned.specifier if spec.operator == "<")
    assert (highest.major, highest.minor) == (lowest.major, lowest.minor + 1), "pin one minor release: >=X.Y,<X.Y+1"


def test_the_uvicorn_internals_the_connection_layer_stands_on_have_not_moved() -> None:
    moved = [name for name, thing in READ.items() if digest(thing) != DIGESTS[name]]
    assert not moved, (
        f"uvicorn {uvicorn.__version__} changed {', '.join(moved)}: re-read app/serving.py against it, then record "
        "the new digests (python -m tests.test_serving_internals)"
    )


def test_httptools_offers_what_the_connection_layer_calls() -> None:
    parser = httptools.HttpRequestParser(object())
    for method in ("feed_data", "get_method", "get_http_version", "should_keep_alive", "should_upgrade"):
        assert callable(getattr(parser, method)), method
    url = httptools.parse_url(b"http://example.test/v1/ids/wiji?count=2")
    assert (url.path, url.query) == (b"/v1/ids/wiji", b"count=2")
    assert httptools.parse_url(b"http://example.test").path is None  # no path: a 400 (BoundedHttpToolsProtocol)
    assert issubclass(httptools.HttpParserInvalidURLError, httptools.HttpParserError)


if __name__ == "__main__":
    for name, thing in READ.items():
        print(f'    "{name}": "{digest(thing)}",')


class _Loop:
    """A loop whose clock moves only when a test fires its next timer."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> object:
        self.timers.append((self.now + delay, callback))
        return self

    def cancel(self) -> None:  # the TimerHandle the protocol may cancel
        pass

    def fire_next(self) -> None:
        self.timers.sort(key=lambda timer: timer[0])
        self.now, callback = self.timers.pop(0)
        callback()


class _Transport:
    def __init__(self, unsent: int) -> None:
        self.unsent = unsent

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def get_extra_info(self, name: str) -> None:
        return None


class _Connection:
    """What the send timer reads of a connection, with BoundedHttpToolsProtocol's own two methods."""

    _watch_send: Any = BoundedHttpToolsProtocol._watch_send
    _send_check: Any = BoundedHttpToolsProtocol._send_check

    def __init__(self, unsent: int, timeout: float) -> None:
        self.loop, self.transport = _Loop(), _Transport(unsent)
        self.limits = ConnectionLimits(65_536, 10.0, timeout)
        self.send_timer: object | None = None
        self.send_left, self.send_progress_at = 0, 0.0
        self.closing, self.client, self.running, self.cycle = False, None, None, None
        self.aborted_at: float | None = None

    def _abort(self) -> None:
        self.aborted_at = self.loop.now


def run_until_cut(connection: _Connection, taken: Callable[[float], int]) -> float | None:
    """Fire the send timer until the connection is cut or nothing waits; ``taken(t)``: bytes taken by time t."""
    first = connection.transport.unsent
    connection._watch_send()
    while connection.loop.timers and connection.aborted_at is None and connection.loop.now < 1000:
        connection.transport.unsent = first - taken(connection.loop.timers[0][0])
        connection.loop.fire_next()
    return connection.aborted_at


def test_an_unread_answer_is_cut_one_send_timeout_after_the_kernels_took_their_first_window() -> None:
    """The kernels take a window of bytes just after an answer is written (into the send and receive buffers),
    then a client that reads nothing takes no more: the cut comes one timeout (and at most a tenth) later, not
    two (a single check a timeout after arming saw the first window as progress and waited a second timeout)."""
    connection = _Connection(unsent=2_800_000, timeout=30.0)
    cut = run_until_cut(connection, lambda t: 0 if t < 0.01 else 200_000)  # the first window, then nothing
    assert cut is not None and 30.0 <= cut <= 33.0, cut


def test_a_client_that_keeps_taking_bytes_slowly_is_never_cut() -> None:
    connection = _Connection(unsent=1_000_000, timeout=30.0)
    assert run_until_cut(connection, lambda t: min(1_000_000, int(t // 20) * 100_000)) is None  # 100 kB / 20 s
    assert connection.transport.unsent == 0
