"""The conformance suite's fault proxy: an HTTP/1.1 proxy on a free loopback port in front of one real idmint server
(or several, taken in turn), whose answers the driver breaks on purpose. Standard library only.

Every request is forwarded as it came (method, path, query, body, headers less the hop-by-hop ones) unless the
current *mode* answers it; modes act on the issuing routes (``/v1/ids/...`` and a sequence's ``next`` or ``range``)
and let the catalogue, ``/v1/fleet`` and decode through, unless ``every_route`` is set. The modes:

=============  ===========================================================================================
``pass``       forward (counting requests and the IDs of 200 ID answers)
``refuse``     503 + ``Retry-After: retry_after`` and a JSON ``detail``, as a node that cannot issue
``status``     ``status`` (401, 404, 422, 500...) with a JSON ``detail``
``redirect``   307 to ``location`` + the request's path and query
``garbage``    200 with ``size`` random bytes (the upstream's content type)
``html``       200 ``text/html`` with a proxy's welcome page (``as_text``: labelled ``text/plain``)
``truncate``   the upstream's answer cut after ``after`` body bytes (a batch: half of it), connection closed
``drip``       the upstream's status and headers, then the body a byte every ``interval`` seconds
``kill``       forward ``after`` body bytes (a batch: half of it), then SIGKILL the upstream server
               (``on_kill``) and break the answer there: a server killed mid-call
``repeat``     the upstream's answer with its last ID (or sequence integer) replaced by its first: an ID twice
``replay``     the first answer to each method, path and query kept and sent again for every later one
``splice``     the first answer to each method, path and query (less ``count``) kept; every later one sent with its
               own first and last IDs around the kept answer's middle ones (as many as fit); a stream is read
               whole, then sent as one chunk (``split``: a spliced one's first line, then the rest after ``interval`` s)
``middle``     the first answer to each method, path and query (less ``count``; a sequence's ``next`` and
               ``range`` share one) kept; every later one sent led by the kept answer's middle ID or integer in place
               of its own first (a ``range``: moved to start there); a stream is read whole, then sent as one chunk
               (``split`` as for ``splice``)
``lb``         every request to the next upstream in turn: one URL in front of several generators
``relabel``    the upstream's batch answer with its ``scheme`` and/or ``format`` fields replaced by those given
``huge``       200 with a body of ``size`` bytes (default 100 MB), made as it is sent: a batch's JSON head, then its
               first ID over and over; a stream's one line without end. ``declared``: with a Content-Length
               (else chunked)
``silent``     the request read, then nothing: the connection held open, no answer (a hung node)
=============  ===========================================================================================
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
UPSTREAM_TIMEOUT_S = 60.0
DRIP_LIMIT_S = 120.0
"""A dripping answer stops after this long, whether or not the client still listens (every loop is bounded)."""
HTML = b"<!doctype html>\n<html><body>\n<h1>Welcome to our proxy</h1>\n</body></html>\n"


@dataclass
class Seen:
    """What a proxy saw: each request's method, path and query, and its Authorization header."""

    method: str
    path: str
    query: str
    authorization: str | None


@dataclass
class Mode:
    name: str = "pass"
    params: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)


class QuietServer(ThreadingHTTPServer):
    """A client going away mid-answer is what the faults are about: not worth a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        return


def issuing(method: str, path: str) -> bool:
    """Whether a request asks for IDs or sequence integers (the routes modes act on)."""
    if path.startswith("/v1/ids/"):
        return True
    return path.startswith("/v1/sequences/") and path.rsplit("/", 1)[-1] in ("next", "range")


class FaultProxy:
    """A running proxy: :attr:`url`; :meth:`set` changes its mode; :attr:`seen` and :attr:`ids_passed` count
    what went through; :meth:`close` stops it. ``upstreams``: base URLs (several only for mode ``lb``);
    ``on_kill``: what mode ``kill`` calls (SIGKILL the upstream server)."""

    def __init__(self, upstreams: list[str], on_kill: Callable[[], None] | None = None) -> None:
        self.upstreams = upstreams
        self.on_kill = on_kill
        self.mode = Mode()
        self.seen: list[Seen] = []
        self.ids_passed = 0
        self._turn = 0
        self._cache: dict[tuple[str, str], tuple[int, list[tuple[str, str]], bytes]] = {}
        self._spliced_from: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # http.server's naming
                proxy.handle(self)

            do_POST = do_GET

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def set(self, name: str, **params: Any) -> None:
        with self._lock:
            self.mode = Mode(name, params)
            self._cache.clear()
            self._spliced_from.clear()

    def reset(self) -> None:
        with self._lock:
            self.seen.clear()
            self.ids_passed = 0

    def close(self) -> None:
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()

    # -- one request ---------------------------------------------------------------------------------------------
    def handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urllib.parse.urlsplit(h.path)
        length = int(h.headers.get("content-length") or 0)
        body = h.rfile.read(length) if length else b""
        with self._lock:
            self.seen.append(Seen(h.command, parts.path, parts.query, h.headers.get("authorization")))
            mode = self.mode
        acts = mode.get("every_route", False) or issuing(h.command, parts.path)
        name = mode.name if acts else "pass"
        try:
            if name == "refuse":
                wait = mode.get("retry_after", 30)
                detail = {"detail": "not ready: the proxy's node lost its lease", "retry_after": wait}
                return self._send(h, 503, _json(detail), {"retry-after": str(wait)})
            if name == "status":
                code = int(mode.get("status", 500))
                return self._send(h, code, _json({"detail": mode.get("detail", f"the proxy answers {code}")}))
            if name == "redirect":
                return self._send(h, 307, b"", {"location": mode.get("location", "") + h.path})
            if name == "silent":
                self._stopping.wait(DRIP_LIMIT_S)
                h.close_connection = True
                return None
            if name == "replay":
                key = (h.command, h.path)
                with self._lock:
                    cached = self._cache.get(key)
                if cached is not None:
                    status, headers, content = cached
                    return self._send(h, status, content, dict(headers))
            self._forward(h, name, mode, parts.path, body)
        except (OSError, http.client.HTTPException):
            h.close_connection = True

    def _upstream(self, name: str) -> str:
        with self._lock:
            self._turn += 1
            return self.upstreams[self._turn % len(self.upstreams)] if name == "lb" else self.upstreams[0]

    def _forward(self, h: BaseHTTPRequestHandler, name: str, mode: Mode, path: str, body: bytes) -> None:
        target = urllib.parse.urlsplit(self._upstream(name))
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=UPSTREAM_TIMEOUT_S)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != "host"}
        try:
            conn.request(h.command, h.path, body=body or None, headers=headers)
            response = conn.getresponse()
        except OSError:
            conn.close()
            return self._send(h, 502, _json({"detail": "the proxy's upstream is unreachable"}))
        try:
            status = response.status
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP | {"content-length"}]
            streamed = path.endswith("/stream") and status == 200
            if status != 200 or name in ("pass", "lb", "replay", "refuse", "status", "redirect"):
                if streamed and name != "replay":
                    return self._relay_stream(h, response, kept, name, mode)
                content = response.read()
                if status == 200:
                    self._count(content, streamed)
                if name == "replay" and status == 200:
                    with self._lock:
                        self._cache.setdefault((h.command, h.path), (status, kept, content))
                return self._send(h, status, content, dict(kept))
            if name == "garbage":
                response.read()
                return self._send(h, 200, os.urandom(int(mode.get("size", 600))), dict(kept))
            if name == "html":
                response.read()
                kind = "text/plain; charset=us-ascii" if mode.get("as_text") else "text/html; charset=utf-8"
                return self._send(h, 200, HTML, {"content-type": kind})
            if name == "huge":
                return self._send_huge(h, response.read(), kept, streamed, mode)
            if name == "relabel":
                data = json.loads(response.read())
                data.update({k: mode.get(k) for k in ("scheme", "format") if mode.get(k) is not None})
                return self._send(h, 200, _json(data), dict(kept))
            if streamed and name in ("splice", "middle"):
                key = _splice_key(h)
                with self._lock:
                    split = bool(mode.get("split")) and key in self._spliced_from  # the kept answer goes whole
                lines = (self._spliced if name == "splice" else self._led_by_middle)(key, response.read(), True)
                return self._send_lines(h, lines, kept, split, float(mode.get("interval", 0)))
            if streamed:
                return self._relay_stream(h, response, kept, name, mode)
            content = response.read()
            if name == "repeat":
                return self._send(h, 200, _repeated_json(content), dict(kept))
            if name == "splice":
                return self._send(h, 200, self._spliced(_splice_key(h), content), dict(kept))
            if name == "middle":
                return self._send(h, 200, self._led_by_middle(_splice_key(h), content), dict(kept))
            if name in ("truncate", "kill"):
                cut = int(mode.get("after", len(content) // 2))
                return self._send_cut(h, content, kept, cut, kill=name == "kill")
            if name == "drip":
                return self._drip(h, content, kept, float(mode.get("interval", 0.2)))
            return self._send(h, status, content, dict(kept))
        finally:
            conn.close()

    # -- answers -------------------------------------------------------------------------------------------------
    def _send(
        self, h: BaseHTTPRequestHandler, status: int, content: bytes, headers: dict[str, str] | None = None
    ) -> None:
        h.send_response(status)
        for key, value in (headers or {}).items():
            if key.lower() not in ("content-length", "date", "server"):
                h.send_header(key, value)
        h.send_header("content-length", str(len(content)))
        h.end_headers()
        h.wfile.write(content)
        h.wfile.flush()

    def _spliced(self, key: str, content: bytes, streamed: bool = False) -> bytes:
        """``content`` (a batch's JSON or a stream's lines) with the IDs between its ends replaced by those of the
        first answer kept under ``key`` (kept when there is none yet)."""
        data = json.loads(content) if not streamed else None
        ids = data["ids"] if data is not None else content.decode("ascii").splitlines()
        with self._lock:
            old = self._spliced_from.get(key)
            if old is None:
                self._spliced_from[key] = list(ids)
        if old is not None and len(ids) > 2:
            middle = old[1 : len(ids) - 1]
            ids[1 : 1 + len(middle)] = middle
        if data is not None:
            return _json(data)
        return "".join(line + "\n" for line in ids).encode("ascii")

    def _led_by_middle(self, key: str, content: bytes, streamed: bool = False) -> bytes:
        """``content`` (a batch's or ``next``'s JSON, a ``range``'s JSON or a stream's lines) led by the middle ID or
        integer of the first answer kept under ``key`` (kept when there is none yet)."""
        data = json.loads(content) if not streamed else None
        if data is not None and "ids" not in data:  # a range: its integers, first..last
            low, high = int(data["first"]), int(data["last"])
            values = [str(low), str((low + high) // 2), str(high)]
        else:
            values = data["ids"] if data is not None else content.decode("ascii").splitlines()
        with self._lock:
            old = self._spliced_from.get(key)
            if old is None:
                self._spliced_from[key] = list(values)
        if old is not None and len(old) > 2 and values:
            middle = old[len(old) // 2]
            if data is not None and "ids" not in data:
                count = int(data["last"]) - int(data["first"])
                data["first"], data["last"] = middle, str(int(middle) + count)
            else:
                values[0] = middle
        if data is not None:
            return _json(data)
        return "".join(line + "\n" for line in values).encode("ascii")

    def _send_lines(
        self, h: BaseHTTPRequestHandler, content: bytes, kept: list[tuple[str, str]], split: bool, interval: float
    ) -> None:
        """A stream answer of ``content``: one chunk, or (``split``) its first line, then the rest ``interval``
        seconds later (so that the client reads two chunks)."""
        h.send_response(200)
        for key, value in kept:
            if key.lower() not in ("date", "server"):
                h.send_header(key, value)
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        cut = content.find(b"\n") + 1 if split else len(content)
        _chunk(h, content[:cut])
        if split:
            self._stopping.wait(interval)
        _chunk(h, content[cut:])
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _send_cut(
        self, h: BaseHTTPRequestHandler, content: bytes, kept: list[tuple[str, str]], cut: int, kill: bool
    ) -> None:
        """Promise the whole length, send ``cut`` bytes (then SIGKILL the upstream when ``kill``), and close."""
        h.send_response(200)
        for key, value in kept:
            if key.lower() not in ("date", "server"):
                h.send_header(key, value)
        h.send_header("content-length", str(len(content)))
        h.end_headers()
        h.wfile.write(content[:cut])
        h.wfile.flush()
        if kill and self.on_kill is not None:
            self.on_kill()
        self._abort(h)

    def _drip(self, h: BaseHTTPRequestHandler, content: bytes, kept: list[tuple[str, str]], interval: float) -> None:
        h.send_response(200)
        for key, value in kept:
            if key.lower() not in ("date", "server"):
                h.send_header(key, value)
        h.send_header("content-length", str(len(content)))
        h.end_headers()
        h.wfile.flush()
        ends = time.monotonic() + DRIP_LIMIT_S
        for byte in content:
            if self._stopping.wait(interval) or time.monotonic() > ends:
                break
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
        self._abort(h)

    def _relay_stream(
        self,
        h: BaseHTTPRequestHandler,
        response: http.client.HTTPResponse,
        kept: list[tuple[str, str]],
        name: str,
        mode: Mode,
    ) -> None:
        """Relay a stream answer chunk by chunk (chunked transfer), breaking it as ``name`` says."""
        h.send_response(200)
        for key, value in kept:
            if key.lower() not in ("date", "server"):
                h.send_header(key, value)
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        after = int(mode.get("after", 1000))
        sent = 0
        held = b""
        repeated = False
        ends = time.monotonic() + DRIP_LIMIT_S
        while True:
            try:
                data = response.read1(65536)
            except (OSError, http.client.HTTPException):
                return self._abort(h)  # the upstream broke (killed): so does the answer
            if not data:
                break
            if name == "repeat" and not repeated:
                held += data
                lines = held.split(b"\n")
                if len(lines) < 3:
                    continue
                lines[1] = lines[0]
                data, held, repeated = b"\n".join(lines), b"", True
            if name in ("truncate", "kill") and sent + len(data) >= after:
                _chunk(h, data[: max(after - sent, 0)])
                if name == "kill" and self.on_kill is not None:
                    self.on_kill()
                return self._abort(h)
            if name == "drip":
                for byte in data:
                    if self._stopping.wait(float(mode.get("interval", 0.2))) or time.monotonic() > ends:
                        return self._abort(h)
                    _chunk(h, bytes([byte]))
                sent += len(data)
                continue
            self._count(data, True)
            _chunk(h, data)
            sent += len(data)
        if held:
            _chunk(h, held)
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _send_huge(
        self, h: BaseHTTPRequestHandler, content: bytes, kept: list[tuple[str, str]], streamed: bool, mode: Mode
    ) -> None:
        """``size`` bytes of an answer that looks right but has no end in sight (see the ``huge`` mode), sent until
        all is sent or the client goes away."""
        size = int(mode.get("size", 100 * 1024 * 1024))
        if streamed:
            head, unit = b"", content.split(b"\n", 1)[0] or b"A"
        else:
            data = json.loads(content)
            head = _json({k: v for k, v in data.items() if k != "ids"})[:-1] + b', "ids": ['
            unit = _json(data["ids"][0]) + b","
        block = unit * max(1, 65536 // len(unit))
        h.send_response(200)
        for key, value in kept:
            if key.lower() not in ("date", "server"):
                h.send_header(key, value)
        declared = bool(mode.get("declared", False))
        h.send_header("content-length" if declared else "transfer-encoding", str(size) if declared else "chunked")
        h.end_headers()
        send: Callable[[bytes], None] = h.wfile.write if declared else (lambda data: _chunk(h, data))
        send(head)
        sent = len(head)
        while sent < size and not self._stopping.is_set():
            part = block[: size - sent]
            send(part)
            sent += len(part)
        if not declared:
            h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _abort(self, h: BaseHTTPRequestHandler) -> None:
        h.close_connection = True
        try:
            h.wfile.flush()
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _count(self, content: bytes, streamed: bool) -> None:
        if streamed:
            found = content.count(b"\n")
        else:
            try:
                found = len(json.loads(content).get("ids", []))
            except (ValueError, AttributeError):
                found = 0
        with self._lock:
            self.ids_passed += found


def _splice_key(h: BaseHTTPRequestHandler) -> str:
    """The method, path and query of a request less its ``count``: a carried-on stream is spliced too. A
    sequence's ``next`` and ``range`` share one key (the sequence's path)."""
    parts = urllib.parse.urlsplit(h.path)
    query = sorted((k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "count")
    path = parts.path
    if path.startswith("/v1/sequences/") and path.rsplit("/", 1)[-1] in ("next", "range"):
        path = path.rsplit("/", 1)[0]
        return f"SEQUENCE {path}"
    return f"{h.command} {path}?{urllib.parse.urlencode(query)}"


def _chunk(h: BaseHTTPRequestHandler, data: bytes) -> None:
    if data:
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _repeated_json(content: bytes) -> bytes:
    """A batch or ``next`` answer with its last ID replaced by its first (an ID twice, the count unchanged)."""
    data = json.loads(content)
    ids = data.get("ids")
    if isinstance(ids, list) and len(ids) > 1:
        ids[-1] = ids[0]
    return _json(data)
