"""The baseline for bench_http.py: the leanest possible ASGI app. Served by the same uvicorn settings as idmint,
it bounds what any Python ASGI app can do on this machine.

* any path but ``/stream``: a fixed Wiji-shaped JSON body (single-ID requests/s);
* ``/stream?count=N&width=W``: N lines of W - 1 fixed characters and a newline, sent in chunks of 65,536 lines
  (idmint's stream chunk) with chunked transfer encoding, as idmint streams: the HTTP path's ceiling in IDs/s for
  an ID of W - 1 characters, with no ID generated at all.
"""

from urllib.parse import parse_qs

BODY = b'{"scheme":"wiji","format":"base32","ids":["0691J1V9G0000G7Q3N6T1XAFNG"]}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
STREAM_HEADERS = [(b"content-type", b"text/plain; charset=us-ascii")]
CHUNK_LINES = 65_536


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"] == "/stream":
        query = parse_qs(scope["query_string"].decode())
        count, width = int(query["count"][0]), int(query.get("width", ["27"])[0])
        chunk = (b"x" * (width - 1) + b"\n") * CHUNK_LINES
        await send({"type": "http.response.start", "status": 200, "headers": STREAM_HEADERS})
        while count > 0:
            lines = min(count, CHUNK_LINES)
            await send({"type": "http.response.body", "body": chunk[: lines * width], "more_body": True})
            count -= lines
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
