"""The application factory: ``create_app(settings)`` builds the FastAPI app, the node and its lease backend.

Run with ``uvicorn --factory app.main:create_app`` or ``idmint serve``. Nothing heavy happens at import time; the
lifespan owns the node's background tasks and cancels them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from app import __version__
from app.api import admin, bounds, decode, ids, meta
from app.api import sequences as sequence_routes
from app.api.auth import ApiKeys
from app.api.contract import install_openapi
from app.api.errors import install_error_handlers
from app.api.front import Front, HotRoute
from app.api.streams import StreamSlots
from app.ledger import Ledger
from app.metrics import Metrics
from app.node import Node, node_clock
from app.schemes import schemes
from app.schemes.base import Clock
from app.sequences import SequenceService
from app.settings import Settings, load_settings
from app.storage import open_storage

NS_IN_S = 1_000_000_000


def create_app(settings: Settings | None = None, *, clock: Clock | None = None) -> Front:
    """Build the ASGI app for ``settings`` (default: from the environment). Returns the one ASGI layer in front of
    FastAPI (:class:`~app.api.front.Front`: body limit, hot routes, API keys when a key file is set, drain, request
    metrics); the FastAPI app itself is its ``.app`` attribute.
    ``clock`` (ns, like :func:`time.time_ns`; None: the real clocks) is the node's and the
    API keys' quota clock, for tests. Raises ConfigError for a key file that does not load."""
    settings = settings or load_settings()
    metrics = Metrics(list(schemes()), __version__)
    node_time = clock or node_clock(settings)
    storage = open_storage(settings, node_time, metrics)
    node = Node(settings, storage, metrics, clock=node_time)
    node.attach_ledger(
        Ledger(
            storage.ledger,
            retention_days=settings.ledger_days,
            clock=node_time,
            fleet_id=lambda: node.fleet.fleet_id,
            failures=metrics.ledger_write_failed,
        )
    )
    owner = node.owner
    sequences = SequenceService(
        storage.sequences,
        metrics,
        settings.max_count,
        clock=node_time,
        node=f"pod {owner.pod}" if owner.pod else f"{owner.host} pid {owner.pid}",
        ledger_days=settings.ledger_days,
    )
    keys: ApiKeys | None = None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await node.start()
        app.state.node = node
        await sequences.start()
        if keys is not None:
            keys.start()
        try:
            yield
        finally:
            if keys is not None:
                keys.stop()
            decode.shutdown_text_pool()
            await sequences.stop()
            await node.stop()
            await storage.close()

    # FastAPIOffline: /docs and /redoc from the package's own Swagger UI and ReDoc files, not a CDN (the machine
    # running idmint may have no internet).
    api = FastAPIOffline(
        title="idmint",
        version=__version__,
        summary=f"Issue and decode {', '.join(s.title for s in schemes().values())} IDs; node identities leased "
        "via etcd or PostgreSQL.",
        lifespan=lifespan,
        favicon_url="/static/favicon.svg",
        max_body_size=settings.max_body_bytes,  # bodies without a declared length: counted as they are read
    )
    api.state.settings = settings
    # Each of `idmint serve --workers N` processes serves its 1/N share of the node's streams (at least one).
    streams_here = max(1, settings.max_concurrent_streams // settings.workers)
    api.state.streams = StreamSlots(streams_here, settings.max_stream_seconds, settings.stream_send_timeout)
    api.state.node = node
    api.state.sequences = sequences
    drain = api.state.drain = admin.Drain()
    install_error_handlers(api)
    install_openapi(api, settings.api_keys_file is not None, settings.public_scopes)
    api.include_router(ids.router)
    api.include_router(decode.router)
    api.include_router(bounds.router)
    api.include_router(meta.router)
    api.include_router(sequence_routes.router)
    api.include_router(admin.router)
    _include_page(api)

    hot = [
        HotRoute("GET", "/v1/ids/{scheme}", ids.hot_issue(node, settings)),
        HotRoute("GET", sequence_routes.NEXT_ROUTE, sequence_routes.hot_next(sequences)),
        HotRoute("POST", sequence_routes.RANGE_ROUTE, sequence_routes.hot_range(sequences)),
    ]
    if settings.api_keys_file is not None:  # no key file: no key work at all (the hot path pays nothing)
        seconds = time.monotonic if clock is None else (lambda: clock() / NS_IN_S)
        keys = ApiKeys(settings.api_keys_file, settings.public_scopes, metrics, settings.workers, seconds)
    return Front(
        api,
        hot,
        max_body_bytes=settings.max_body_bytes,
        drain=drain,
        metrics=metrics,
        keys=keys,
        cors_origins=settings.cors_origins,
    )


def _include_page(api: FastAPI) -> None:
    try:
        from app.api import page
    except ImportError:
        return
    api.include_router(page.router)
    mount = getattr(page, "mount_static", None)
    if mount is not None:
        mount(api)
