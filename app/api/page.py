"""The support staff's decode page: ``GET /`` and ``GET /decode`` serve it, ``/static/...`` its assets.

The page (``app/static/index.html``, ``decode.js``, ``decode.css``) is plain HTML, CSS and JavaScript shipped as
package data: no build step, no CDN, no external fonts. It only presents what the JSON decode API answers
(``POST /v1/decode``, ``GET /v1/schemes``); scheme detection, validation and token picking stay on the server.
Deep link: ``/decode?id=<text>`` opens with ``<text>`` decoded (the script reads the query string).

:func:`mount_static` mounts the assets; :func:`app.main.create_app` calls it beside ``include_router(router)``.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

from fastapi import APIRouter, FastAPI
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from app.api.access import declare

router = APIRouter()

STATIC_URL_PATH = "/static"
STATIC_ROUTE_NAME = "static"
PAGE_FILE = "index.html"

# Everything the page loads comes from this server; nothing inline, no framing by other sites.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'; "
        "form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def static_dir() -> Path:
    """The directory holding the page's files, inside the installed ``app`` package.

    Raises RuntimeError when the package was installed without its static files.
    """
    directory = Path(str(resources.files("app").joinpath("static")))
    if not (directory / PAGE_FILE).is_file():
        raise RuntimeError(f"the decode page is missing: {directory / PAGE_FILE} does not exist")
    return directory


@lru_cache(maxsize=1)
def _page_bytes() -> bytes:
    return (static_dir() / PAGE_FILE).read_bytes()


def mount_static(app: FastAPI) -> None:
    """Serve the page's assets under ``/static/...`` (Starlette StaticFiles, with ETag and Last-Modified)."""
    app.mount(STATIC_URL_PATH, StaticFiles(directory=static_dir()), name=STATIC_ROUTE_NAME)


@router.get("/", include_in_schema=False, openapi_extra=declare("decode"))
@router.get("/decode", include_in_schema=False, openapi_extra=declare("decode"))
async def decode_page() -> Response:
    """The decode page (HTML). ``?id=`` is read by the page's script, not here."""
    return Response(_page_bytes(), media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)
