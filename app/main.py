"""The application factory: ``create_app(settings)`` builds the FastAPI app, the node and its lease backend.

Run with ``uvicorn --factory app.main:create_app`` or ``idmint serve``. Nothing heavy happens at import time; the
lifespan owns the node's background tasks and cancels them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from app import __version__
from app.api import decode, ids, meta
from app.api import sequences as sequence_routes
from app.api.errors import install_error_handlers
from app.api.fastpath import FastPath
from app.lease import make_backend
from app.lease.sequences import make_store
from app.metrics import Metrics
from app.node import Node
from app.schemes import schemes
from app.sequences import SequenceService
from app.settings import Settings, load_settings


def create_app(settings: Settings | None = None) -> sequence_routes.SequenceFastPath:
    """Build the ASGI app for ``settings`` (default: from the environment). Returns the fast-path ASGI wrapper
    around the FastAPI app; the FastAPI app itself is its ``.app`` attribute."""
    settings = settings or load_settings()
    metrics = Metrics(list(schemes()), __version__)
    node = Node(settings, make_backend(settings, metrics), metrics)
    sequences = SequenceService(make_store(settings), metrics, settings.max_count)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await node.start()
        app.state.node = node
        await sequences.start()
        try:
            yield
        finally:
            await sequences.stop()
            await node.stop()

    # FastAPIOffline: /docs and /redoc from the package's own Swagger UI and ReDoc files, not a CDN (the machine
    # running idmint may have no internet).
    api = FastAPIOffline(
        title="idmint",
        version=__version__,
        summary=f"Issue and decode {', '.join(s.title for s in schemes().values())} IDs; node identities leased "
                "via etcd.",
        lifespan=lifespan,
        favicon_url="/static/favicon.svg",
    )
    api.state.settings = settings
    api.state.node = node
    api.state.sequences = sequences
    install_error_handlers(api)
    api.include_router(ids.router)
    api.include_router(decode.router)
    api.include_router(meta.router)
    api.include_router(sequence_routes.router)
    _include_page(api)

    wrapper = FastPath(api, lambda: api.state.node, lambda: settings.max_count)
    return sequence_routes.SequenceFastPath(wrapper, api, lambda: sequences, metrics)


def _include_page(api: FastAPI) -> None:
    try:
        from app.api import page
    except ImportError:
        return
    api.include_router(page.router)
    mount = getattr(page, "mount_static", None)
    if mount is not None:
        mount(api)
