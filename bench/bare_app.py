"""The baseline for bench_http.py: the leanest possible ASGI app, answering every request with a fixed
Wiji-shaped JSON body. Served by the same uvicorn settings as idmint, it bounds what any Python ASGI app can do."""

BODY = b'{"scheme":"wiji","format":"base32","ids":["0691J1V9G0000G7Q3N6T1XAFNG"]}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):  # noqa: ANN001, ANN201
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
