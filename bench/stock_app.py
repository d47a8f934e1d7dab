"""The service a team would write instead of running idmint: stock FastAPI returning uuid-utils' UUIDv7s.

``bench/bench_http.py`` part (d) serves it on the same uvicorn flags as idmint and compares
``GET /v1/ids/uuidv7?count=N`` of both (idmint should answer at least 3x its single-ID and 5x its
``count=1000`` requests/s). Written as its docs suggest: a path operation with a validated query parameter,
returning a dict that FastAPI serialises.
"""

import uuid_utils
from fastapi import FastAPI, Query

app = FastAPI()


@app.get("/v1/ids/uuidv7")
async def ids(count: int = Query(1, ge=1, le=100_000)) -> dict[str, object]:
    return {"scheme": "uuidv7", "ids": [str(uuid_utils.uuid7()) for _ in range(count)]}


@app.get("/readyz")
async def ready() -> dict[str, str]:
    return {"status": "ok"}
